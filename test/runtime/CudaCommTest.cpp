//===- CudaCommTest.cpp - The NCCL communicator at world size 1 -----------===//
//
// The collectives of runtime/cuda/comm_nccl.h on one rank (each group has one
// member, so every collective is a copy) and their byte counters. The
// multi-GPU run is scripts/gpu-check's job. Skipped without a device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/cuda/comm_nccl.h"
#include "runtime/cuda/cuda_memory.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <unistd.h>

using namespace loom;
using namespace loom::test;

namespace {

class CudaCommTest : public CudaTest {};

TEST_F(CudaCommTest, WorldOfOneRunsEveryCollective) {
  SingleRankCommunicator bootstrap;
  std::unique_ptr<cuda::NcclCommunicator> comm;
  Status s = cuda::createNcclWorldCommunicator(bootstrap, stream, comm);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(comm->setMesh({{"dp", 1}, {"tp", 1}}).ok());
  EXPECT_STREQ(comm->backend(), "nccl");
  std::vector<float> x{1, 2, 3, 4};
  DeviceVector<float> buf(x), out(4);
  ASSERT_TRUE(comm->allReduce(buf.get(), 4, program::DType::F32,
                              program::Reduction::Sum, {0}).ok());
  EXPECT_EQ(buf.host(), x);
  Communicator::Ticket t = -1;
  ASSERT_TRUE(comm->startAllReduce(buf.get(), 4, program::DType::F32,
                                   program::Reduction::Avg, {0, 1}, t).ok());
  ASSERT_TRUE(comm->complete(t).ok());
  EXPECT_EQ(buf.host(), x);
  ASSERT_TRUE(
      comm->allGather(buf.get(), out.get(), 4, program::DType::F32, {1}).ok());
  EXPECT_EQ(out.host(), x);
  ASSERT_TRUE(comm->reduceScatter(buf.get(), out.get(), 4, program::DType::F32,
                                  program::Reduction::Sum, {0}).ok());
  EXPECT_EQ(out.host(), x);
  DeviceVector<float> scattered(4);
  ASSERT_TRUE(comm->startReduceScatter(buf.get(), scattered.get(), 4,
                                       program::DType::F32,
                                       program::Reduction::Sum, {0}, t)
                  .ok());
  ASSERT_TRUE(comm->complete(t).ok());
  EXPECT_EQ(scattered.host(), x);
  ASSERT_TRUE(
      comm->allToAll(buf.get(), out.get(), 4, program::DType::F32, {0}).ok());
  EXPECT_EQ(out.host(), x);
  ASSERT_TRUE(comm->flush().ok());
  ASSERT_TRUE(comm->barrier().ok());
  EXPECT_EQ(comm->stats().calls[0], 2);
}

TEST(NcclFileBootstrap, ClearErrorsBeforeAnyDeviceCall) {
  // Ranks started without mpirun (loom-run with LOOM_RANK / LOOM_WORLD_SIZE)
  // find rank 0's ncclUniqueId in a file; what goes wrong before NCCL is
  // reached needs no GPU.
  std::unique_ptr<cuda::NcclCommunicator> comm;
  Status s = cuda::createNcclFileCommunicator(2, 2, "/tmp/x", 1, nullptr, comm);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("LOOM_RANK must be in [0, LOOM_WORLD_SIZE)"),
            std::string::npos)
      << s.message();
  s = cuda::createNcclFileCommunicator(1, 2, "", 1, nullptr, comm);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("set LOOM_NCCL_ID_FILE to a fresh path"),
            std::string::npos)
      << s.message();
  const std::string missing =
      ::testing::TempDir() + "/nccl-id-never-written-" +
      std::to_string(::getpid());
  s = cuda::createNcclFileCommunicator(1, 2, missing, 0.05, nullptr, comm);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 waited 0.05 s for rank 0's ncclUniqueId "
                             "in '" + missing +
                             "'; start rank 0 (LOOM_RANK=0) with the same "
                             "LOOM_NCCL_ID_FILE"),
            std::string::npos)
      << s.message();
  // A file that is not an id.
  { std::ofstream(missing) << "short"; }
  s = cuda::createNcclFileCommunicator(1, 2, missing, 1, nullptr, comm);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not hold a 128-byte ncclUniqueId"),
            std::string::npos)
      << s.message();
  std::remove(missing.c_str());
}

TEST_F(CudaCommTest, SendToItselfIsDeliveredInOrderAndBuffered) {
  // Sends copy the message (the buffer may change at once) and a rank's
  // messages to itself arrive in send order; a host value goes through the
  // bound device memory.
  SingleRankCommunicator bootstrap;
  std::unique_ptr<cuda::NcclCommunicator> comm;
  ASSERT_TRUE(cuda::createNcclWorldCommunicator(bootstrap, stream, comm).ok());
  ASSERT_TRUE(comm->setMesh({{"pp", 1}}).ok());
  DeviceVector<float> a(std::vector<float>{1, 2}), b(std::vector<float>{3, 4});
  DeviceVector<float> got(2);
  ASSERT_TRUE(comm->send(a.get(), 2, program::DType::F32, 0, 1).ok());
  ASSERT_TRUE(comm->send(b.get(), 2, program::DType::F32, 0, 2).ok());
  ASSERT_EQ(cudaMemsetAsync(a.get(), 0, 8, stream), cudaSuccess);
  ASSERT_TRUE(comm->recv(got.get(), 2, program::DType::F32, 0, 1).ok());
  EXPECT_EQ(got.host(), (std::vector<float>{1, 2}));
  ASSERT_TRUE(comm->recv(got.get(), 2, program::DType::F32, 0, 2).ok());
  EXPECT_EQ(got.host(), (std::vector<float>{3, 4}));
  Status s = comm->recv(got.get(), 2, program::DType::F32, 0, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no matching send"), std::string::npos);
  // Host values need the bound memory, then travel through it.
  float v = 2.0f;
  s = comm->allReduceHost(&v, 1, program::DType::F32, program::Reduction::Sum,
                          {0});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the nccl communicator moves device buffers "
                             "only"),
            std::string::npos)
      << s.message();
  cuda::CudaMemory memory(stream);
  comm->bindBufferMemory(&memory);
  ASSERT_TRUE(comm->allReduceHost(&v, 1, program::DType::F32,
                                  program::Reduction::Sum, {0})
                  .ok());
  EXPECT_EQ(v, 2.0f);
  comm->bindBufferMemory(nullptr);
  ASSERT_TRUE(comm->flush().ok());
}

TEST_F(CudaCommTest, WatchdogStaysQuietWhileEveryCallCompletes) {
  // A limit of 50 ms, far below this test's length: a false alarm would end
  // the test process (the watchdog's handler exits) instead of passing.
  SingleRankCommunicator bootstrap;
  std::unique_ptr<cuda::NcclCommunicator> comm;
  Status s = cuda::createNcclWorldCommunicator(bootstrap, stream, comm, 0.05);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(comm->setMesh({{"dp", 1}, {"tp", 1}}).ok());
  std::vector<float> x{1, 2, 3, 4};
  DeviceVector<float> buf(x), out(4);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(comm->allReduce(buf.get(), 4, program::DType::F32,
                                program::Reduction::Sum, {0})
                    .ok());
    ASSERT_TRUE(
        comm->allGather(buf.get(), out.get(), 4, program::DType::F32, {1})
            .ok());
    ASSERT_TRUE(comm->flush().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(comm->barrier().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(out.host(), x);
  // A negative limit is refused.
  s = cuda::createNcclWorldCommunicator(bootstrap, stream, comm, -1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the NCCL timeout must not be negative"),
            std::string::npos)
      << s.message();
}

} // namespace
