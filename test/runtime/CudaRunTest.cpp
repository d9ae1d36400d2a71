//===- CudaRunTest.cpp - loom-run's flows on the device ---------*- C++ -*-===//
//
// The driver loom-run uses (runtime/core/training_run.h) with the backend
// `loom-run --backend cuda` builds: CudaKernels and CudaMemory on one
// compute stream, collectives on a single-rank communicator (device copies
// through the bound memory) or on NCCL at world size 1. Training with a
// checkpoint, resume from it, evaluation and sampling must follow the CPU
// run within fp32 round-off (GEMM order differs; TF32 is off): per-step
// loss and gradient norm within 1e-4 relative, checkpoint tensors within
// 1e-4, the resumed run equal to the uninterrupted device run. Skipped
// without a device; test/e2e/train-guarded-memory.test checks the same
// flows on the CPU with memory the host may not touch, and
// loom-cuda-emulation-tests runs them on emulated devices.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "ProgramTestUtil.h"
#include "TestUtil.h"

#include "runtime/core/json.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/token_data.h"
#include "runtime/core/training_run.h"
#include "runtime/cuda/comm_nccl.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_memory.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace loom;
using namespace loom::test;

namespace {

std::string tempPath(const std::string &name) {
  const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "/cudarun_" + std::to_string(::getpid()) + "_" +
         (info ? info->name() : "none") + "_" + name;
}

void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
  ASSERT_TRUE(f.good()) << path;
}

/// Per-step (loss, grad_norm) of a --log-json file.
std::vector<std::pair<double, double>> readLog(const std::string &path) {
  std::vector<std::pair<double, double>> steps;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    JsonValue v;
    EXPECT_TRUE(parseJson(line, v).ok()) << line;
    if (!v.find("step"))
      continue;
    const JsonValue *norm = v.find("grad_norm");
    steps.emplace_back(v.find("loss")->asDouble(),
                       norm ? norm->asDouble() : 0.0);
  }
  return steps;
}

void expectLogsClose(const std::string &a, const std::string &b, double rtol) {
  const auto x = readLog(a), y = readLog(b);
  ASSERT_EQ(x.size(), y.size());
  ASSERT_FALSE(x.empty());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(x[i].first, y[i].first, rtol * std::fabs(x[i].first))
        << "loss of step " << i;
    EXPECT_NEAR(x[i].second, y[i].second, rtol * std::fabs(x[i].second))
        << "grad norm of step " << i;
  }
}

/// Whether element i of checkpoint tensor `name` (numel elements) is a key
/// bias: c_attn.bias is [q | k | v], and adding b to every key adds q.b to
/// a whole row of scores, which the softmax cancels. Its gradient is zero
/// up to round-off, and AdamW, which divides by the gradient's own scale,
/// turns that round-off into steps of up to about lr: two backends with
/// different summation orders move it differently, by design of the
/// optimizer, not by a fault of either.
bool isKeyBias(const std::string &name, int64_t numel, int64_t i) {
  const std::string suffix = ".attn.c_attn.bias";
  if (name.size() < suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  return i >= numel / 3 && i < 2 * numel / 3;
}

/// The learning rate of every run here (CudaRunTest::trainOptions).
constexpr double kLearningRate = 1e-2;

/// Every tensor within `tol` (relative and absolute); key-bias elements,
/// when `keyBiasSteps` > 0, within the 2 lr per step two runs can drift
/// apart.
void expectCheckpointsClose(const std::string &a, const std::string &b,
                            double tol, int64_t keyBiasSteps = 0) {
  SafetensorsFile fa, fb;
  ASSERT_TRUE(readSafetensors(a, fa).ok());
  ASSERT_TRUE(readSafetensors(b, fb).ok());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  EXPECT_EQ(fa.metadata, fb.metadata);
  for (const SafeTensor &t : fa.tensors) {
    const SafeTensor *u = fb.find(t.name);
    ASSERT_TRUE(u) << t.name;
    ASSERT_EQ(t.shape, u->shape) << t.name;
    const float *x = reinterpret_cast<const float *>(t.data.data());
    const float *y = reinterpret_cast<const float *>(u->data.data());
    std::vector<float> vx, vy;
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (keyBiasSteps > 0 && isKeyBias(t.name, t.numel(), i)) {
        EXPECT_LE(std::fabs(x[i] - y[i]), 2 * kLearningRate * keyBiasSteps)
            << t.name << "[" << i << "] (key bias)";
        continue;
      }
      vx.push_back(x[i]);
      vy.push_back(y[i]);
    }
    expectClose(vx, vy, tol, tol, t.name);
  }
}

class CudaRunTest : public CudaTest {
protected:
  /// The backend loom-run --backend cuda builds, on this test's stream.
  ExecutorBackendFactory cudaBackend() {
    cudaStream_t s = stream;
    return [s](std::unique_ptr<KernelBackend> &kernels,
               std::unique_ptr<BufferMemory> &memory) -> Status {
      std::unique_ptr<cuda::CudaKernels> k;
      LOOM_RETURN_IF_ERROR(cuda::CudaKernels::create(s, k));
      kernels = std::move(k);
      memory = std::make_unique<cuda::CudaMemory>(s);
      return Status::success();
    };
  }

  void writeInputs(const fb::ProgramT &p) {
    program = tempPath("train.loom");
    data = tempPath("tokens.bin");
    writeBytes(program, serialize(p));
    ASSERT_TRUE(writeTokenFile(data, randomIds(4096, 50, 3)).ok());
  }

  RunOptions trainOptions(int64_t steps, const std::string &log,
                          const std::string &save,
                          const std::string &load = "") {
    RunOptions o;
    o.program = program;
    o.data = data;
    o.steps = steps;
    o.scheduleSteps = 4;
    o.warmup = 1;
    o.lr = kLearningRate;
    o.quiet = true;
    o.logJson = log;
    o.saveCheckpoint = save;
    o.loadCheckpoint = load;
    return o;
  }

  /// Train 4 steps on the CPU and on `comm` + the device; then 2 + 2 steps
  /// with a device checkpoint in between.
  void trainAndResume(Communicator &deviceComm) {
    SingleRankCommunicator cpuComm;
    const std::string cpuLog = tempPath("cpu.jsonl"),
                      cpuCkpt = tempPath("cpu.safetensors");
    const std::string gpuLog = tempPath("gpu.jsonl"),
                      gpuCkpt = tempPath("gpu.safetensors");
    Status s = runProgram(trainOptions(4, cpuLog, cpuCkpt), cpuComm);
    ASSERT_TRUE(s.ok()) << s.toString();
    s = runProgram(trainOptions(4, gpuLog, gpuCkpt), deviceComm, cudaBackend());
    ASSERT_TRUE(s.ok()) << s.toString();
    expectLogsClose(cpuLog, gpuLog, 1e-4);
    expectCheckpointsClose(cpuCkpt, gpuCkpt, 1e-4, /*keyBiasSteps=*/4);
    // Resume on the device from the device's own checkpoint at step 2.
    const std::string firstLog = tempPath("first.jsonl"),
                      half = tempPath("half.safetensors"),
                      secondLog = tempPath("second.jsonl"),
                      resumed = tempPath("resumed.safetensors");
    s = runProgram(trainOptions(2, firstLog, half), deviceComm, cudaBackend());
    ASSERT_TRUE(s.ok()) << s.toString();
    s = runProgram(trainOptions(2, secondLog, resumed, half), deviceComm,
                   cudaBackend());
    ASSERT_TRUE(s.ok()) << s.toString();
    auto whole = readLog(gpuLog), first = readLog(firstLog),
         second = readLog(secondLog);
    first.insert(first.end(), second.begin(), second.end());
    ASSERT_EQ(first.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i)
      EXPECT_NEAR(first[i].first, whole[i].first, 1e-6 * whole[i].first)
          << "resumed step " << i;
    expectCheckpointsClose(gpuCkpt, resumed, 1e-6);
    trained = cpuCkpt;
  }

  std::string program, data, trained;
};

TEST_F(CudaRunTest, TrainCheckpointResumeOnTheSingleRankCommunicator) {
  writeInputs(*miniGptTrainTwoMicrobatches());
  SingleRankCommunicator comm; // copies device buffers through CudaMemory
  trainAndResume(comm);
}

TEST_F(CudaRunTest, TrainCheckpointResumeOnNcclWorldOfOne) {
  auto p = miniGptTrainTwoMicrobatches();
  makeSingleChunkPipeline(*p); // stashes and the pipeline's loss path too
  writeInputs(*p);
  SingleRankCommunicator bootstrap;
  std::unique_ptr<cuda::NcclCommunicator> nccl;
  Status s = cuda::createNcclWorldCommunicator(bootstrap, stream, nccl);
  ASSERT_TRUE(s.ok()) << s.toString();
  trainAndResume(*nccl);
}

TEST_F(CudaRunTest, EvaluateAndSampleLikeTheCpu) {
  // Weights from a CPU training run; then the evaluation program and
  // greedy sampling on the device.
  MiniGptDims d;
  d.B = 4;
  writeInputs(*miniGptTrain(d, {}));
  SingleRankCommunicator comm;
  const std::string ckpt = tempPath("trained.safetensors");
  Status s = runProgram(trainOptions(3, "", ckpt), comm);
  ASSERT_TRUE(s.ok()) << s.toString();
  MiniGptDims e = d;
  const std::string eval = tempPath("eval.loom");
  writeBytes(eval, serialize(*miniGpt(e)));
  RunOptions o;
  o.program = eval;
  o.data = data;
  o.steps = 2;
  o.quiet = true;
  o.loadCheckpoint = ckpt;
  o.logJson = tempPath("eval-cpu.jsonl");
  s = runProgram(o, comm);
  ASSERT_TRUE(s.ok()) << s.toString();
  RunOptions g = o;
  g.logJson = tempPath("eval-gpu.jsonl");
  s = runProgram(g, comm, cudaBackend());
  ASSERT_TRUE(s.ok()) << s.toString();
  expectLogsClose(o.logJson, g.logJson, 1e-4);
  // Sampling reads the logits row back through CudaMemory.
  RunOptions sample;
  sample.program = eval;
  sample.loadCheckpoint = ckpt;
  sample.sample = 6;
  sample.prompt = "!#"; // bytes below the vocabulary of 50
  sample.hasPrompt = true;
  sample.quiet = true;
  std::string texts[2];
  for (int onDevice = 0; onDevice < 2; ++onDevice) {
    ::testing::internal::CaptureStdout();
    s = onDevice ? runSample(sample, cudaBackend()) : runSample(sample);
    texts[onDevice] = ::testing::internal::GetCapturedStdout();
    ASSERT_TRUE(s.ok()) << s.toString();
  }
  EXPECT_EQ(texts[1], texts[0]);
  EXPECT_EQ(texts[0].size(), 2u + 6u + 1u) << texts[0];
}

} // namespace
