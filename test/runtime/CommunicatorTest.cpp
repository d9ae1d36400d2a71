//===- CommunicatorTest.cpp - Packing and the single-rank communicator ----===//
//
// packBlocks / unpackBlocks against index arithmetic, the ring byte formulas,
// mesh geometry (coordinates, groups, block indices) and the
// SingleRankCommunicator (collectives copy, send / recv to itself), plus the
// executor refusing a multi-rank program on one rank. The multi-rank
// behaviour is tested under mpirun by loom-mpi-tests (MpiTest.cpp).
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/communicator.h"
#include "runtime/core/executor.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace loom;
using namespace loom::test;

TEST(PackBlocks, SplitsTheDimensionIntoContiguousChunks) {
  // [2, 6, 3] split along dim 1 into 3 blocks of [2, 2, 3].
  const std::vector<int64_t> shape = {2, 6, 3};
  std::vector<int32_t> src(36);
  std::iota(src.begin(), src.end(), 0);
  std::vector<int32_t> packed(36, -1), back(36, -1);
  packBlocks(packed.data(), src.data(), shape, 1, 3, 4);
  // Chunk j, element (a, b, c) = src[a][2j + b][c].
  for (int j = 0; j < 3; ++j)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b)
        for (int c = 0; c < 3; ++c)
          EXPECT_EQ(packed[j * 12 + a * 6 + b * 3 + c],
                    src[a * 18 + (2 * j + b) * 3 + c]);
  unpackBlocks(back.data(), packed.data(), {2, 2, 3}, 1, 3, 4);
  EXPECT_EQ(back, src);
  // Dim 0 and the last dim.
  packBlocks(packed.data(), src.data(), shape, 0, 2, 4);
  EXPECT_EQ(packed, src);
  packBlocks(packed.data(), src.data(), shape, 2, 3, 4);
  for (int j = 0; j < 3; ++j)
    for (int r = 0; r < 12; ++r)
      EXPECT_EQ(packed[j * 12 + r], src[r * 3 + j]);
  unpackBlocks(back.data(), packed.data(), {2, 6, 1}, 2, 3, 4);
  EXPECT_EQ(back, src);
}

TEST(Communicator, RingByteFormulas) {
  EXPECT_EQ(ringBytes(CommKind::AllReduce, 1000, 4), 1500);
  EXPECT_EQ(ringBytes(CommKind::AllGather, 1000, 4), 750);
  EXPECT_EQ(ringBytes(CommKind::ReduceScatter, 1000, 2), 500);
  EXPECT_EQ(ringBytes(CommKind::AllToAll, 1000, 4), 750);
  EXPECT_EQ(ringBytes(CommKind::Send, 1000, 4), 1000);
  EXPECT_EQ(ringBytes(CommKind::AllReduce, 1000, 1), 0);
}

TEST(Communicator, SingleRankCollectivesCopy) {
  SingleRankCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  ASSERT_TRUE(comm.setMesh({{"dp", 1}, {"tp", 1}}).ok());
  EXPECT_EQ(comm.groupSize({0, 1}), 1);
  EXPECT_EQ(comm.coordOn("dp"), 0);
  EXPECT_EQ(comm.axisSize("pp"), 1);
  std::vector<float> a = {1, 2, 3}, b(3);
  ASSERT_TRUE(comm.allReduce(a.data(), 3, program::DType::F32,
                             program::Reduction::Avg, {0})
                  .ok());
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE(comm.allGather(a.data(), b.data(), 3, program::DType::F32, {1})
                  .ok());
  EXPECT_EQ(b, a);
  b.assign(3, 0);
  ASSERT_TRUE(comm.reduceScatter(a.data(), b.data(), 3, program::DType::F32,
                                 program::Reduction::Sum, {0})
                  .ok());
  EXPECT_EQ(b, a);
  b.assign(3, 0);
  ASSERT_TRUE(
      comm.allToAll(a.data(), b.data(), 3, program::DType::F32, {0}).ok());
  EXPECT_EQ(b, a);
  // Send to itself, matched by tag.
  std::vector<int32_t> x = {7, 8}, y = {9}, got(2);
  ASSERT_TRUE(comm.send(x.data(), 2, program::DType::I32, 0, 5).ok());
  ASSERT_TRUE(comm.send(y.data(), 1, program::DType::I32, 0, 6).ok());
  ASSERT_TRUE(comm.recv(got.data(), 1, program::DType::I32, 0, 6).ok());
  EXPECT_EQ(got[0], 9);
  ASSERT_TRUE(comm.recv(got.data(), 2, program::DType::I32, 0, 5).ok());
  EXPECT_EQ(got, x);
  Status s = comm.recv(got.data(), 2, program::DType::I32, 0, 5);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no matching send"), std::string::npos);
  // Group size 1: nothing crosses the network except sends.
  const CommStats &st = comm.stats();
  EXPECT_EQ(st.sentBytes[static_cast<int>(CommKind::AllReduce)], 0);
  EXPECT_EQ(st.sentBytes[static_cast<int>(CommKind::Send)], 12);
  EXPECT_EQ(st.calls[static_cast<int>(CommKind::AllGather)], 1);
}

TEST(Communicator, SingleRankBF16CollectivesKeepTheBits) {
  // A group of one: a bf16 sum / average is the value itself (already a
  // bf16, so rounding it once changes nothing), moves copy 2-byte
  // elements, and sends count 2 bytes per element.
  SingleRankCommunicator comm;
  ASSERT_TRUE(comm.setMesh({{"dp", 1}}).ok());
  const std::vector<uint16_t> a = {0x3f80, 0x7fc1, 0xff80, 0x0001, 0x8000};
  for (program::Reduction op :
       {program::Reduction::Sum, program::Reduction::Avg}) {
    std::vector<uint16_t> x = a;
    ASSERT_TRUE(
        comm.allReduce(x.data(), 5, program::DType::BF16, op, {0}).ok());
    EXPECT_EQ(x, a);
    ASSERT_TRUE(
        comm.allReduceAmong(x.data(), 5, program::DType::BF16, op, 0, {0})
            .ok());
    EXPECT_EQ(x, a);
  }
  std::vector<uint16_t> b(5);
  ASSERT_TRUE(
      comm.allGather(a.data(), b.data(), 5, program::DType::BF16, {0}).ok());
  EXPECT_EQ(b, a);
  b.assign(5, 0);
  ASSERT_TRUE(comm.reduceScatter(a.data(), b.data(), 5, program::DType::BF16,
                                 program::Reduction::Sum, {0})
                  .ok());
  EXPECT_EQ(b, a);
  b.assign(5, 0);
  ASSERT_TRUE(
      comm.allToAll(a.data(), b.data(), 5, program::DType::BF16, {0}).ok());
  EXPECT_EQ(b, a);
  comm.resetStats();
  ASSERT_TRUE(comm.send(a.data(), 5, program::DType::BF16, 0, 1).ok());
  b.assign(5, 0);
  ASSERT_TRUE(comm.recv(b.data(), 5, program::DType::BF16, 0, 1).ok());
  EXPECT_EQ(b, a);
  EXPECT_EQ(comm.stats().sentBytes[static_cast<int>(CommKind::Send)], 10);
}

TEST(Communicator, WorldSizeMismatchNamesBoth) {
  SingleRankCommunicator comm;
  Status s = comm.setMesh({{"dp", 2}, {"tp", 1}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("program was compiled for dp=2,tp=1 (2 ranks)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("use -np 2"), std::string::npos) << s.message();
  // The executor refuses such a program on one rank.
  auto p = miniGpt();
  auto axis = std::make_unique<program::MeshAxisT>();
  axis->name = "dp";
  axis->size = 2;
  p->mesh.push_back(std::move(axis));
  p->model->batch = 4;
  program::LoadedProgram loaded;
  ASSERT_TRUE(program::loadProgramBytes(serialize(*p), "dp2.loom", loaded).ok());
  std::unique_ptr<Executor> ex;
  s = Executor::create(loaded, 0, 1, ex);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("compiled for dp=2 (2 ranks)"), std::string::npos)
      << s.message();
}
