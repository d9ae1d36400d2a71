//===- BufferMemoryTest.cpp - Executor keeps off buffer memory --*- C++ -*-===//
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
    if (!p8) { // a stash buffer: its slot is free again after the step
      out.buffers.emplace_back();
      continue;
    }
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
  expectSame(*miniGptTrainTwoMicrobatches());
}

TEST(BufferMemory, PipelineStashesGoThroughTheBackend) {
  auto p = miniGptTrainTwoMicrobatches();
  makeSingleChunkPipeline(*p);
  expectSame(*p);
}

TEST(BufferMemory, BF16StagingLivesInBufferMemory) {
  // Mixed precision: every instruction with bf16 operands widens them into
  // the executor's staging memory, runs the fp32 kernel there and rounds
  // back; masters are initialized, updated and cast. The staging must be
  // buffer memory the host never touches (plain and as a pipeline stage).
  auto p = miniGptTrainTwoMicrobatches();
  makeMixedPrecision(*p);
  expectSame(*p);
  auto piped = miniGptTrainTwoMicrobatches();
  makeSingleChunkPipeline(*piped);
  makeMixedPrecision(*piped);
  expectSame(*piped);
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

//===----------------------------------------------------------------------===//
// The communicator on buffer memory
//===----------------------------------------------------------------------===//

namespace {

/// A one-rank transport that reads and writes host memory, as MPI does: a
/// poisoned buffer reaching its do*() methods faults, so the base class
/// must stage buffers through the host.
class HostLoopback final : public Communicator {
public:
  HostLoopback() : Communicator(0, 1) {}
  const char *backend() const override { return "host-loopback"; }
  void abort(int) override {}

protected:
  Status move(void *out, const void *in, int64_t count, program::DType dt) {
    std::memmove(out, in, static_cast<size_t>(count * program::dtypeBytes(dt)));
    return Status::success();
  }
  Status doAllReduce(void *, int64_t, program::DType, program::Reduction,
                     const std::vector<uint32_t> &) override {
    return Status::success();
  }
  Status doAllGather(const void *in, void *out, int64_t count,
                     program::DType dt,
                     const std::vector<uint32_t> &) override {
    return move(out, in, count, dt);
  }
  Status doReduceScatter(const void *in, void *out, int64_t count,
                         program::DType dt, program::Reduction,
                         const std::vector<uint32_t> &) override {
    return move(out, in, count, dt);
  }
  Status doAllToAll(const void *in, void *out, int64_t count, program::DType dt,
                    const std::vector<uint32_t> &) override {
    return move(out, in, count, dt);
  }
  Status doSend(const void *buf, int64_t count, program::DType dt, int,
                int64_t) override {
    const auto *p = static_cast<const uint8_t *>(buf);
    sent.assign(p, p + count * program::dtypeBytes(dt));
    return Status::success();
  }
  Status doRecv(void *buf, int64_t, program::DType, int, int64_t) override {
    std::memcpy(buf, sent.data(), sent.size());
    return Status::success();
  }
  Status doFlush() override { return Status::success(); }
  Status doBarrier() override { return Status::success(); }

private:
  std::vector<uint8_t> sent;
};

/// A transport of device pointers only (as NCCL): its do*() methods move
/// bytes with the bound memory's own calls, which refuse a host pointer, so
/// host values must be staged through a buffer temporary.
class DeviceOnly final : public Communicator {
public:
  DeviceOnly() : Communicator(0, 1) {}
  const char *backend() const override { return "device-only"; }
  void abort(int) override {}

protected:
  bool transportsHostMemory() const override { return false; }
  bool requiresBoundMemoryForHost() const override { return true; }
  Status move(void *out, const void *in, int64_t count, program::DType dt) {
    return memory->copy(out, in,
                        static_cast<uint64_t>(count * program::dtypeBytes(dt)));
  }
  Status doAllReduce(void *buf, int64_t count, program::DType dt,
                     program::Reduction,
                     const std::vector<uint32_t> &) override {
    return move(buf, buf, count, dt);
  }
  Status doAllGather(const void *in, void *out, int64_t count,
                     program::DType dt,
                     const std::vector<uint32_t> &) override {
    return move(out, in, count, dt);
  }
  Status doReduceScatter(const void *in, void *out, int64_t count,
                         program::DType dt, program::Reduction,
                         const std::vector<uint32_t> &) override {
    return move(out, in, count, dt);
  }
  Status doAllToAll(const void *in, void *out, int64_t count, program::DType dt,
                    const std::vector<uint32_t> &) override {
    return move(out, in, count, dt);
  }
  Status doSend(const void *buf, int64_t count, program::DType dt, int,
                int64_t) override {
    sent.resize(static_cast<size_t>(count * program::dtypeBytes(dt)));
    return memory->copyOut(sent.data(), buf, sent.size());
  }
  Status doRecv(void *buf, int64_t, program::DType, int, int64_t) override {
    return memory->copyIn(buf, sent.data(), sent.size());
  }
  Status doFlush() override { return Status::success(); }
  Status doBarrier() override { return Status::success(); }

private:
  std::vector<uint8_t> sent;
};

/// Runs every collective of `comm` (bound to `mem`) on poisoned buffers and
/// on host values, checking what arrives.
void exerciseCollectives(Communicator &comm, PoisonedMemory &mem) {
  ASSERT_TRUE(comm.setMesh({{"dp", 1}}).ok());
  comm.bindBufferMemory(&mem);
  uint8_t *a = nullptr, *b = nullptr;
  ASSERT_TRUE(mem.allocate(64, a).ok());
  ASSERT_TRUE(mem.allocate(64, b).ok());
  const std::vector<float> x = {1, 2, 3, 4};
  std::vector<float> got(4);
  auto readB = [&]() {
    got.assign(4, 0.0f);
    EXPECT_TRUE(mem.copyOut(got.data(), b, 16).ok());
    return got;
  };
  ASSERT_TRUE(mem.copyIn(a, x.data(), 16).ok());
  using program::DType;
  ASSERT_TRUE(comm.allGather(a, b, 4, DType::F32, {0}).ok());
  EXPECT_EQ(readB(), x);
  ASSERT_TRUE(mem.fillZero(b, 16).ok());
  ASSERT_TRUE(
      comm.reduceScatter(a, b, 4, DType::F32, program::Reduction::Sum, {0})
          .ok());
  EXPECT_EQ(readB(), x);
  ASSERT_TRUE(mem.fillZero(b, 16).ok());
  ASSERT_TRUE(comm.allToAll(a, b, 4, DType::F32, {0}).ok());
  EXPECT_EQ(readB(), x);
  Communicator::Ticket t = -1;
  ASSERT_TRUE(
      comm.startAllReduce(a, 4, DType::F32, program::Reduction::Sum, {0}, t)
          .ok());
  ASSERT_TRUE(comm.complete(t).ok());
  ASSERT_TRUE(mem.fillZero(b, 16).ok());
  ASSERT_TRUE(comm.send(a, 4, DType::F32, 0, 3).ok());
  ASSERT_TRUE(comm.recv(b, 4, DType::F32, 0, 3).ok());
  EXPECT_EQ(readB(), x);
  ASSERT_TRUE(
      comm.allReduceAmong(a, 4, DType::F32, program::Reduction::Sum, 0, {0})
          .ok());
  // Host values.
  std::vector<float> h = x, hout(4);
  ASSERT_TRUE(
      comm.allReduceHost(h.data(), 4, DType::F32, program::Reduction::Max, {0})
          .ok());
  EXPECT_EQ(h, x);
  ASSERT_TRUE(
      comm.allGatherHost(x.data(), hout.data(), 4, DType::F32, {0}).ok());
  EXPECT_EQ(hout, x);
  hout.assign(4, 0.0f);
  ASSERT_TRUE(comm.sendHost(x.data(), 4, DType::F32, 0, 4).ok());
  ASSERT_TRUE(comm.recvHost(hout.data(), 4, DType::F32, 0, 4).ok());
  EXPECT_EQ(hout, x);
  comm.bindBufferMemory(nullptr); // releases the staging temporary
  mem.release(a, 64);
  mem.release(b, 64);
}

} // namespace

TEST(BufferMemory, SingleRankCollectivesCopyThroughTheBoundMemory) {
  PoisonedMemory mem;
  SingleRankCommunicator comm;
  const uint64_t before = guardCounters().copies;
  exerciseCollectives(comm, mem);
  EXPECT_GT(guardCounters().copies, before);
}

TEST(BufferMemory, HostTransportsStageBufferMemoryThroughTheHost) {
  // The MPI case: without staging, the loopback's memmove on a poisoned
  // pointer would fault.
  PoisonedMemory mem;
  HostLoopback comm;
  exerciseCollectives(comm, mem);
}

TEST(BufferMemory, DeviceTransportsNeedABoundMemoryForHostValues) {
  DeviceOnly comm;
  ASSERT_TRUE(comm.setMesh({{"dp", 1}}).ok());
  float v = 1.0f;
  Status s = comm.allReduceHost(&v, 1, program::DType::F32,
                                program::Reduction::Sum, {0});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the device-only communicator moves device "
                             "buffers only: collectives on host values need "
                             "the executor's buffer memory"),
            std::string::npos)
      << s.message();
  PoisonedMemory mem;
  exerciseCollectives(comm, mem); // staged through the bound memory
}

TEST(BufferMemory, TokenIdsAreCheckedOnTheHostBeforeCopyIn) {
  // A device kernel cannot report a bad id: the executor refuses it before
  // it reaches buffer memory, naming the row and position.
  fb::LoadedProgram loaded;
  Status s = fb::loadProgramBytes(serialize(*miniGptTrainTwoMicrobatches()),
                                  "ids.loom", loaded);
  ASSERT_TRUE(s.ok()) << s.toString();
  auto memory = std::make_unique<PoisonedMemory>();
  PoisonedMemory &mem = *memory;
  std::unique_ptr<Executor> ex;
  s = Executor::create(loaded, 0, 7, ex, nullptr,
                       std::make_unique<GuardedKernels>(mem),
                       std::move(memory));
  ASSERT_TRUE(s.ok()) << s.toString();
  const int64_t V = ex->model().vocab_size(), T = ex->model().seq();
  auto inputs = randomIds(ex->localBatch() * T, V, 5);
  auto targets = randomIds(ex->localBatch() * T, V, 6);
  inputs[3 * T + 2] = static_cast<int32_t>(V); // row 3: micro-batch 1
  TrainStepResult r;
  s = ex->trainStep(inputs.data(), targets.data(), 1, 1e-2f, r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token id " + std::to_string(V) +
                             " at row 3, position 2 of this rank's batch is "
                             "outside the vocabulary [0, " +
                             std::to_string(V) + ")"),
            std::string::npos)
      << s.message();
  inputs[3 * T + 2] = 0;
  targets[0] = -1;
  s = ex->trainStep(inputs.data(), targets.data(), 1, 1e-2f, r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("target id -1 at row 0, position 0"),
            std::string::npos)
      << s.message();
  // evaluate() is for unpipelined evaluation programs only.
  float loss = 0;
  s = ex->evaluate(inputs.data(), targets.data(), loss);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is not an unpipelined evaluation program"),
            std::string::npos)
      << s.message();
  // Host copies into and out of a buffer check its size.
  std::vector<uint8_t> big(ex->bufferBytes(0) + 4);
  s = ex->copyToBuffer(0, big.data(), big.size());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bytes into buffer #0 of"), std::string::npos)
      << s.message();
  s = ex->copyFromBuffer(0, big.data(), big.size());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bytes out of buffer #0 of"), std::string::npos)
      << s.message();
}
