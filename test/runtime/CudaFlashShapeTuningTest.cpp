//===- CudaFlashShapeTuningTest.cpp - Timed attention launch shapes -------===//
//
// runtime/cuda/flash_shape_tuning.h: the tuner keeps, per geometry and
// kernel, the candidate whose launch took least time between two events on
// the stream. Its launches here are memsets of very different sizes (a
// memset's time grows with its bytes on a device and on the emulated one
// alike), so which one wins is known. LOOM_CUDA_FLASH_SHAPE's parser and
// the choice among times need no device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/flash_shape_tuning.h"

#include <map>

using namespace loom;
using namespace loom::test;
using cuda::FlashGeometry;
using cuda::FlashKernel;
using cuda::FlashShapeTuner;
using cuda::FlashTcOccupancy;

namespace {

TEST(FlashShapeTuning, FastestCandidateKeepsTheFirstOfEquals) {
  EXPECT_EQ(cuda::fastestCandidate({0.3, 0.1, 0.2}), 1u);
  EXPECT_EQ(cuda::fastestCandidate({0.2, 0.3, 0.2}), 0u);
  EXPECT_EQ(cuda::fastestCandidate({0.5}), 0u);
  // The default comes first in every kernel's candidates.
  for (FlashKernel k :
       {FlashKernel::Forward, FlashKernel::Keys, FlashKernel::Queries})
    EXPECT_EQ(cuda::flashShapeCandidates(k).front(),
              cuda::FlashTcShapes{}.forward);
  EXPECT_EQ(cuda::flashShapeCandidates(FlashKernel::Forward).size(), 4u);
  EXPECT_EQ(cuda::flashShapeCandidates(FlashKernel::Keys).size(), 2u);
  EXPECT_EQ(cuda::flashShapeCandidates(FlashKernel::Queries).size(), 3u);
}

TEST(FlashShapeTuning, ParsesTheEnvironmentValue) {
  std::optional<FlashTcOccupancy> shape = FlashTcOccupancy::WideBlocks;
  ASSERT_TRUE(cuda::parseFlashShape(nullptr, shape).ok());
  EXPECT_FALSE(shape) << "auto is the default";
  shape = FlashTcOccupancy::WideBlocks;
  ASSERT_TRUE(cuda::parseFlashShape("", shape).ok());
  EXPECT_FALSE(shape);
  ASSERT_TRUE(cuda::parseFlashShape("auto", shape).ok());
  EXPECT_FALSE(shape);
  const std::pair<const char *, FlashTcOccupancy> fixed[] = {
      {"spill0", FlashTcOccupancy::FewestSpills},
      {"blocks", FlashTcOccupancy::MoreBlocks},
      {"wide", FlashTcOccupancy::WideBlocks},
      {"tall", FlashTcOccupancy::TallWarps}};
  for (const auto &[name, want] : fixed) {
    ASSERT_TRUE(cuda::parseFlashShape(name, shape).ok()) << name;
    ASSERT_TRUE(shape) << name;
    EXPECT_EQ(*shape, want) << name;
    EXPECT_STREQ(cuda::flashShapeName(want), name);
  }
  Status s = cuda::parseFlashShape("8warps", shape);
  ASSERT_FALSE(s.ok());
  for (const char *word : {"LOOM_CUDA_FLASH_SHAPE='8warps'", "auto", "spill0",
                           "blocks", "wide", "tall"})
    EXPECT_NE(s.message().find(word), std::string::npos)
        << word << " in: " << s.message();
}

TEST(FlashShapeTuning, AFixedShapeRunsEveryKernelAndTimesNothing) {
  FlashShapeTuner tuner(FlashTcOccupancy::MoreBlocks);
  const FlashGeometry g{16, 1024, 12};
  for (FlashKernel k :
       {FlashKernel::Forward, FlashKernel::Keys, FlashKernel::Queries})
    EXPECT_FALSE(tuner.untimed(k, g));
  const cuda::FlashTcShapes shapes = tuner.shapesFor(g);
  EXPECT_EQ(shapes.forward, FlashTcOccupancy::MoreBlocks);
  EXPECT_EQ(shapes.keys, FlashTcOccupancy::MoreBlocks);
  EXPECT_EQ(shapes.queries, FlashTcOccupancy::MoreBlocks);
  EXPECT_TRUE(tuner.choices().empty());
}

class CudaFlashShapeTuningTest : public CudaTest {};

// Launches are memsets: `slow` bytes in every shape but `fast`, which
// clears 256 bytes. The tuner must keep `fast` for that kernel only, after
// launching each candidate once to warm up and once a round.
TEST_F(CudaFlashShapeTuningTest, KeepsTheShortestLaunch) {
  constexpr size_t slow = size_t(64) << 20;
  DeviceVector<uint8_t> buffer(slow);
  FlashShapeTuner tuner;
  const FlashGeometry g{4, 96, 2}, other{8, 96, 2};
  ASSERT_TRUE(tuner.untimed(FlashKernel::Queries, g));
  const FlashTcOccupancy fast = FlashTcOccupancy::MoreBlocks;
  std::map<FlashTcOccupancy, int> launches;
  Status s =
      tuner.time(FlashKernel::Queries, g, stream, [&](FlashTcOccupancy shape) {
        ++launches[shape];
        return cudaMemsetAsync(buffer.get(), 0, shape == fast ? 256 : slow,
                               stream) == cudaSuccess
                   ? Status::success()
                   : Status::error("memset failed");
      });
  ASSERT_TRUE(s.ok()) << s.message();
  for (FlashTcOccupancy shape :
       cuda::flashShapeCandidates(FlashKernel::Queries))
    EXPECT_EQ(launches[shape], 1 + FlashShapeTuner::kRounds)
        << cuda::flashShapeName(shape);
  EXPECT_FALSE(tuner.untimed(FlashKernel::Queries, g));
  EXPECT_TRUE(tuner.untimed(FlashKernel::Forward, g));
  EXPECT_TRUE(tuner.untimed(FlashKernel::Queries, other));
  const cuda::FlashTcShapes shapes = tuner.shapesFor(g);
  EXPECT_EQ(shapes.queries, fast);
  EXPECT_EQ(shapes.forward, cuda::FlashTcShapes{}.forward) << "not timed yet";
  EXPECT_EQ(shapes.keys, cuda::FlashTcShapes{}.keys) << "not timed yet";
  EXPECT_EQ(tuner.shapesFor(other).queries, cuda::FlashTcShapes{}.queries);
  const std::vector<std::string> lines = tuner.choices();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("B=4 T=96 heads=2: dQ blocks ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("(spill0 "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(", wide "), std::string::npos) << lines[0];
}

TEST_F(CudaFlashShapeTuningTest, ALaunchErrorNamesTheKernelAndShape) {
  FlashShapeTuner tuner;
  const FlashGeometry g{1, 64, 1};
  Status s =
      tuner.time(FlashKernel::Keys, g, stream, [&](FlashTcOccupancy shape) {
        return shape == FlashTcOccupancy::WideBlocks
                   ? Status::error("too many resources")
                   : Status::success();
      });
  ASSERT_FALSE(s.ok());
  for (const char *word :
       {"too many resources", "dK/dV kernel in launch shape wide",
        "LOOM_CUDA_FLASH_SHAPE"})
    EXPECT_NE(s.message().find(word), std::string::npos)
        << word << " in: " << s.message();
  EXPECT_TRUE(tuner.untimed(FlashKernel::Keys, g)) << "nothing kept";
}

// The tuner's timing rests on cudaEventElapsedTime, which the emulated
// runtime answers as CUDA does: only events created with timing and
// recorded have a time between them; the others are refused.
TEST_F(CudaFlashShapeTuningTest, EventTimesNeedTimingEventsThatWereRecorded) {
  cudaEvent_t start = nullptr, stop = nullptr, untimed = nullptr,
              unrecorded = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&start, cudaEventDefault), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&stop, cudaEventDefault), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&unrecorded, cudaEventDefault),
            cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming),
            cudaSuccess);
  DeviceVector<uint8_t> buffer(size_t(1) << 20);
  ASSERT_EQ(cudaEventRecord(start, stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buffer.get(), 0, size_t(1) << 20, stream),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(stop, stream), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed, stream), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(&ms, unrecorded, stop),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(nullptr, start, stop), cudaErrorInvalidValue);
  // The refusals are not sticky: the stream still works.
  cudaGetLastError();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (cudaEvent_t e : {start, stop, untimed, unrecorded})
    EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
}

} // namespace
