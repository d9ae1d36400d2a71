//===- CudaExecutorTest.cpp - The executor on device memory ----*- C++ -*-===//
//
// The executor with cuda::CudaKernels and cuda::CudaMemory (the arena, the
// temporaries and every host copy on the device) trains a small GPT, plain
// and as a pipeline stage with stashes, like the CPU executor: per-step
// loss and gradient norm, and the final weights, within fp32 round-off
// (bf16 programs: within bf16's resolution, on the native bf16 kernels).
// Skipped without a device (BufferMemoryTest checks the same routing on
// the CPU with a poisoned memory).
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "ProgramTestUtil.h"
#include "TestUtil.h"

#include "runtime/core/executor.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_memory.h"

#include <cmath>
#include <random>

using namespace loom;
using namespace loom::test;

namespace {

class CudaExecutorTest : public CudaTest {
protected:
  struct Trained {
    std::vector<float> losses, norms, weights;
    uint64_t bf16Staging = 0;
  };

  void train(const fb::ProgramT &p, bool onDevice, Trained &out) {
    fb::LoadedProgram loaded;
    Status s = fb::loadProgramBytes(serialize(p), "cuda.loom", loaded);
    ASSERT_TRUE(s.ok()) << s.toString();
    std::unique_ptr<Executor> ex;
    if (onDevice) {
      std::unique_ptr<cuda::CudaKernels> kernels;
      ASSERT_TRUE(cuda::CudaKernels::create(stream, kernels).ok());
      s = Executor::create(loaded, 0, 7, ex, nullptr, std::move(kernels),
                           std::make_unique<cuda::CudaMemory>(stream));
    } else {
      s = Executor::create(loaded, 0, 7, ex);
    }
    ASSERT_TRUE(s.ok()) << s.toString();
    const int64_t n = ex->localBatch() * ex->model().seq();
    std::mt19937 gen(5);
    std::vector<int32_t> inputs(n), targets(n);
    for (int64_t i = 0; i < n; ++i) {
      inputs[i] = static_cast<int32_t>(gen() % ex->model().vocab_size());
      targets[i] = static_cast<int32_t>(gen() % ex->model().vocab_size());
    }
    for (int64_t step = 1; step <= 3; ++step) {
      TrainStepResult r;
      s = ex->trainStep(inputs.data(), targets.data(), step, 1e-2f, r);
      ASSERT_TRUE(s.ok()) << s.toString();
      out.losses.push_back(r.loss);
      out.norms.push_back(r.gradNorm);
    }
    out.bf16Staging = ex->bf16StagingBytes();
    // The fp32 weights: a mixed-precision parameter's master.
    const ParamView &first = ex->params().front();
    const uint32_t w = first.masterBuffer >= 0
                           ? static_cast<uint32_t>(first.masterBuffer)
                           : first.buffer;
    out.weights.resize(static_cast<size_t>(ex->bufferNumel(w)));
    const uint64_t bytes = out.weights.size() * sizeof(float);
    if (onDevice)
      ASSERT_TRUE(cuda::CudaMemory(stream)
                      .copyOut(out.weights.data(), ex->bufferData(w), bytes)
                      .ok());
    else
      std::memcpy(out.weights.data(), ex->bufferData(w), bytes);
  }

  /// Device vs host within `rtol` (fp32 round-off; bf16 programs round
  /// the two backends' slightly different fp32 results to 8 bits).
  void expectSame(const fb::ProgramT &p, double rtol = 1e-4, double atol = 1e-5,
                  Trained *onDevice = nullptr) {
    Trained host, device;
    train(p, false, host);
    train(p, true, device);
    ASSERT_EQ(device.losses.size(), host.losses.size());
    for (size_t i = 0; i < host.losses.size(); ++i) {
      EXPECT_NEAR(device.losses[i], host.losses[i], rtol * host.losses[i]);
      EXPECT_NEAR(device.norms[i], host.norms[i], rtol * host.norms[i]);
    }
    expectClose(device.weights, host.weights, rtol, atol, "first weight");
    if (onDevice)
      *onDevice = device;
  }
};

TEST_F(CudaExecutorTest, TrainsLikeTheCpuExecutor) {
  expectSame(*miniGptTrainTwoMicrobatches());
}

TEST_F(CudaExecutorTest, PipelineStageStashesOnTheDevice) {
  auto p = miniGptTrainTwoMicrobatches();
  makeSingleChunkPipeline(*p);
  expectSame(*p);
}

TEST_F(CudaExecutorTest, MixedPrecisionTrainsLikeTheCpuExecutor) {
  // bf16 weights, activations and gradients on the device's native bf16
  // kernels (cuBLASLt bf16 GEMMs, bf16 flash attention, kernels_bf16.cu),
  // fp32 masters updated and cast: the CPU run's (staged: fp32 kernels on
  // widened copies) losses within bf16's resolution, and no staging memory
  // at all on the device.
  auto p = miniGptTrainTwoMicrobatches();
  makeMixedPrecision(*p);
  Trained device;
  expectSame(*p, 2e-2, 1e-3, &device);
  EXPECT_EQ(device.bf16Staging, 0u);
}

TEST_F(CudaExecutorTest, MixedPrecisionAtGpt2HeadSize) {
  // Head size 64 (GPT-2's): the bf16 flash kernels on tensor cores, T past
  // one tile, a pipeline stage's stashes in bf16.
  MiniGptDims d;
  d.B = 2, d.T = 80, d.C = 128, d.NH = 2;
  MiniGptTrainOptions o;
  o.microbatches = 2;
  auto p = miniGptTrain(d, o);
  makeSingleChunkPipeline(*p);
  makeMixedPrecision(*p);
  Trained device;
  expectSame(*p, 2e-2, 1e-3, &device);
  EXPECT_EQ(device.bf16Staging, 0u);
}

} // namespace
