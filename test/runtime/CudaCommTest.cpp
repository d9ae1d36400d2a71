//===- CudaCommTest.cpp - The NCCL communicator at world size 1 -----------===//
//
// The collectives of runtime/cuda/comm_nccl.h on one rank (each group has one
// member, so every collective is a copy) and their byte counters. The
// multi-GPU run is scripts/gpu-check's job. Skipped without a device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/cuda/comm_nccl.h"

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
  ASSERT_TRUE(
      comm->allToAll(buf.get(), out.get(), 4, program::DType::F32, {0}).ok());
  EXPECT_EQ(out.host(), x);
  ASSERT_TRUE(comm->flush().ok());
  ASSERT_TRUE(comm->barrier().ok());
  EXPECT_EQ(comm->stats().calls[0], 2);
}

} // namespace
