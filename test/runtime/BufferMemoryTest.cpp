//===- BufferMemoryTest.cpp - The executor keeps off buffer memory -*- C++ -*-===//
//
// A device backend's buffer pointers cannot be dereferenced on the host, and
// its kernels cannot read host memory. Without a GPU this test plays the
// device with PoisonedMemory and GuardedKernels (PoisonedMemory.h). A
// training step (plain, micro-batched and as a pipeline stage with stashes)
// must then give bit for bit what the default CPU executor gives: a host
// read or write of the arena by the executor faults, a host temporary
// handed to a kernel is an error. GuardedRun.cpp does the same for the
// whole run loom-run drives (checkpoints, eval, sampling, MPI ranks).
//
//===----------------------------------------------------------------------===//
#include "PoisonedMemory.h"
#include "ProgramTestUtil.h"
#include "TestUtil.h"

#include "runtime/core/buffer_memory.h"
#include "runtime/core/executor.h"
#include "runtime/cpu/cpu_kernels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <sys/mman.h>

using namespace loom;
using namespace loom::test;

namespace {

/// What a few training steps leave: per-step loss and norm, every buffer.
struct Trained {
  std::vector<float> losses, norms;
  std::vector<std::vector<uint8_t>> buffers;
  uint64_t peakTensorBytes = 0;
};

/// Trains `p` for 3 steps on the default CPU executor or on the poisoned
/// one.
void train(const fb::ProgramT &p, bool poisoned, Trained &out) {
  fb::LoadedProgram loaded;
  Status s = fb::loadProgramBytes(serialize(p), "poison.loom", loaded);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::unique_ptr<Executor> ex;
  PoisonedMemory *mem = nullptr;
  if (poisoned) {
    auto memory = std::make_unique<PoisonedMemory>();
    mem = memory.get();
    s = Executor::create(loaded, 0, 7, ex, nullptr,
                         std::make_unique<GuardedKernels>(*mem),
                         std::move(memory));
  } else {
    s = Executor::create(loaded, 0, 7, ex);
  }
  ASSERT_TRUE(s.ok()) << s.toString();
  const int64_t n = ex->localBatch() * ex->model().seq();
  const auto inputs = randomIds(n, ex->model().vocab_size(), 5);
  const auto targets = randomIds(n, ex->model().vocab_size(), 6);
  for (int64_t step = 1; step <= 3; ++step) {
    TrainStepResult r;
    s = ex->trainStep(inputs.data(), targets.data(), step, 1e-2f, r);
    ASSERT_TRUE(s.ok()) << s.toString();
    out.losses.push_back(r.loss);
    out.norms.push_back(r.gradNorm);
  }
  std::optional<PoisonedMemory::Open> open;
  if (mem)
    open.emplace(*mem);
  for (uint32_t b = 0; b < ex->numBuffers(); ++b) {
    const auto *p8 = static_cast<const uint8_t *>(ex->bufferData(b));
    out.buffers.emplace_back(
        p8, p8 + ex->bufferNumel(b) * program::dtypeBytes(ex->bufferDType(b)));
  }
  out.peakTensorBytes = ex->peakTensorBytes();
}

void expectSame(const fb::ProgramT &p) {
  Trained host, device;
  train(p, false, host);
  train(p, true, device);
  EXPECT_EQ(device.losses, host.losses);
  EXPECT_EQ(device.norms, host.norms);
  EXPECT_EQ(device.peakTensorBytes, host.peakTensorBytes);
  ASSERT_EQ(device.buffers.size(), host.buffers.size());
  for (size_t b = 0; b < host.buffers.size(); ++b)
    EXPECT_EQ(device.buffers[b], host.buffers[b]) << "buffer #" << b;
}

} // namespace

TEST(BufferMemory, TrainStepTouchesBufferMemoryOnlyThroughTheBackend) {
  MiniGptDims d;
  d.B = 4;
  MiniGptTrainOptions o;
  o.microbatches = 2;
  expectSame(*miniGptTrain(d, o));
}

TEST(BufferMemory, PipelineStashesGoThroughTheBackend) {
  MiniGptDims d;
  d.B = 4;
  MiniGptTrainOptions o;
  o.microbatches = 2;
  auto p = miniGptTrain(d, o);
  makeSingleChunkPipeline(*p);
  expectSame(*p);
}

TEST(BufferMemory, StagingAndWorkspaceLiveInBufferMemory) {
  // A row-wise kernel over its own input is staged, and LayerNormGrad
  // without scratch buffers takes the executor's workspace: both
  // temporaries must be buffer memory too.
  auto p = emptyProgram(1, 1, 2);
  StageBuilder s(*p->stages[0]);
  const int64_t R = 3, C = 5;
  const uint32_t y = s.buffer("y", {R, C}), sd = s.buffer("softmax.d", {R, C});
  const uint32_t dout = s.buffer("ln.dout", {R, C}), x = s.buffer("ln.x", {R, C});
  const uint32_t w = s.buffer("ln.w", {C}), dx = s.buffer("ln.dx", {R, C});
  const uint32_t dw = s.buffer("ln.dw", {C}), db = s.buffer("ln.db", {C});
  s.op(fb::Opcode::SoftmaxGrad, "softmax.grad.inplace", {sd, y}, {sd});
  s.op(fb::Opcode::LayerNormGrad, "ln.grad", {dout, x, w}, {dx, dw, db})
      .epsilon = 1e-5;
  std::vector<std::vector<uint8_t>> results[2];
  uint64_t peaks[2] = {0, 0}, arena = 0;
  for (int poisoned = 0; poisoned < 2; ++poisoned) {
    fb::LoadedProgram loaded;
    Status st = fb::loadProgramBytes(serialize(*p), "staging.loom", loaded);
    ASSERT_TRUE(st.ok()) << st.toString();
    std::unique_ptr<Executor> ex;
    PoisonedMemory *mem = nullptr;
    if (poisoned) {
      auto memory = std::make_unique<PoisonedMemory>();
      mem = memory.get();
      st = Executor::create(loaded, 0, 7, ex, nullptr,
                            std::make_unique<GuardedKernels>(*mem),
                            std::move(memory));
    } else {
      st = Executor::create(loaded, 0, 7, ex);
    }
    ASSERT_TRUE(st.ok()) << st.toString();
    std::mt19937 gen(9);
    std::uniform_real_distribution<float> dist(0.1f, 1.0f);
    {
      std::optional<PoisonedMemory::Open> open;
      if (mem)
        open.emplace(*mem);
      for (uint32_t b = 0; b < ex->numBuffers(); ++b) {
        auto *f = static_cast<float *>(ex->bufferData(b));
        for (int64_t i = 0; i < ex->bufferNumel(b); ++i)
          f[i] = dist(gen);
      }
    }
    st = ex->run();
    ASSERT_TRUE(st.ok()) << st.toString();
    std::optional<PoisonedMemory::Open> open;
    if (mem)
      open.emplace(*mem);
    for (uint32_t b = 0; b < ex->numBuffers(); ++b) {
      const auto *p8 = static_cast<const uint8_t *>(ex->bufferData(b));
      results[poisoned].emplace_back(p8, p8 + ex->bufferNumel(b) * 4);
    }
    peaks[poisoned] = ex->peakTensorBytes();
    arena = ex->arenaBytes();
  }
  // Temporaries were taken (else this test would prove nothing).
  EXPECT_GT(peaks[0], arena);
  EXPECT_EQ(peaks[1], peaks[0]);
  EXPECT_EQ(results[1], results[0]);
}

TEST(BufferMemory, GuardRefusesHostPointers) {
  // The guard itself must catch a host pointer (else the tests above could
  // not fail).
  PoisonedMemory mem;
  GuardedKernels kernels(mem);
  uint8_t *base = nullptr;
  ASSERT_TRUE(mem.allocate(4096, base).ok());
  std::vector<float> host(4, 1.0f);
  Status s = kernels.add(host.data(), host.data(), host.data(), 4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("add: pointer"), std::string::npos)
      << s.message();
  auto *dev = reinterpret_cast<float *>(base);
  EXPECT_TRUE(kernels.add(dev, dev, dev, 4).ok());
  EXPECT_FALSE(mem.copyIn(host.data(), dev, 16).ok());
  mem.release(base, 4096);
}
