//===- LoomRunTest.cpp - The loom-run command line, end to end --*- C++ -*-===//
//
// Runs the loom-run binary on a hand-built program and token file: the losses
// it logs equal an in-process Executor run on the same batches, the JSON log
// and trace have the documented shape, and every user error is one
// `loom-run: error:` line with exit code 1.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/checkpoint.h"
#include "runtime/core/executor.h"
#include "runtime/core/json.h"
#include "runtime/core/lr_schedule.h"
#include "runtime/core/run_options.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/sampler.h"
#include "runtime/core/stop_request.h"
#include "runtime/core/token_data.h"
#include "runtime/core/training_run.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace loom;
using namespace loom::test;

namespace {

/// A per-test, per-process file name (CTest runs tests in parallel).
std::string tempPath(const std::string &name) {
  const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "/loomrun_" + std::to_string(::getpid()) + "_" +
         (info ? info->name() : "none") + "_" + name;
}

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeText(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

/// Runs loom-run with `args`; returns the exit code, stdout and stderr.
int runLoomRun(const std::string &args, std::string *out = nullptr,
               std::string *err = nullptr) {
  const std::string o = tempPath("stdout.txt"), e = tempPath("stderr.txt");
  const std::string cmd =
      std::string(LOOM_RUN_PATH) + " " + args + " >" + o + " 2>" + e;
  const int status = std::system(cmd.c_str());
  if (out)
    *out = readText(o);
  if (err)
    *err = readText(e);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class LoomRun : public ::testing::Test {
protected:
  void SetUp() override {
    program = tempPath("mini.loom");
    data = tempPath("tokens.bin");
    writeText(program, serialize(*miniGpt()));
    std::vector<int32_t> tokens(200);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<int32_t>((i * 7 + i / 5) % 50);
    ASSERT_TRUE(writeTokenFile(data, tokens).ok());
  }
  void TearDown() override {
    for (const char *name :
         {"mini.loom", "tokens.bin", "log.jsonl", "trace.json",
          "out.safetensors", "stdout.txt", "stderr.txt", "corrupt.loom",
          "wide.bin", "train.loom", "l1.jsonl", "l2.jsonl", "l3.jsonl",
          "l4.jsonl", "a.safetensors", "b.safetensors", "c.safetensors",
          "w.safetensors", "z.safetensors", "bigram.loom",
          "bigram.safetensors"})
      std::remove(tempPath(name).c_str());
  }
  std::string program, data;
};

TEST_F(LoomRun, LossesMatchTheExecutorAndOutputsAreWellFormed) {
  const std::string log = tempPath("log.jsonl"), trace = tempPath("trace.json"),
                    ckpt = tempPath("out.safetensors");
  std::string out, err;
  ASSERT_EQ(runLoomRun(program + " --data " + data + " --steps 3 --seed 7 " +
                           "--log-json " + log + " --trace " + trace +
                           " --save-checkpoint " + ckpt,
                       &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("step 3/3 | loss "), std::string::npos) << out;
  EXPECT_NE(out.find(" tok/s | elapsed "), std::string::npos) << out;

  // The same steps in process.
  fb::LoadedProgram loaded;
  ASSERT_TRUE(fb::loadProgramFile(program, loaded).ok());
  std::unique_ptr<Executor> ex;
  ASSERT_TRUE(Executor::create(loaded, 0, 7, ex).ok());
  TokenDataConfig cfg;
  cfg.batchSize = 2;
  cfg.seqLen = 8;
  cfg.vocabSize = 50;
  std::unique_ptr<TokenDataLoader> loader;
  ASSERT_TRUE(TokenDataLoader::open(data, cfg, loader).ok());
  std::vector<double> expected;
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(
        loader
            ->loadBatch(
                s, static_cast<int32_t *>(ex->bufferData(ex->stage().tokens())),
                static_cast<int32_t *>(ex->bufferData(ex->stage().targets())))
            .ok());
    ASSERT_TRUE(ex->run().ok());
    float loss;
    ASSERT_TRUE(ex->readLoss(loss).ok());
    expected.push_back(loss);
  }

  // JSON log: 3 step lines and a summary.
  std::istringstream lines(readText(log));
  std::string line;
  std::vector<JsonValue> objects;
  while (std::getline(lines, line)) {
    JsonValue v;
    Status s = parseJson(line, v);
    ASSERT_TRUE(s.ok()) << s.toString() << ": " << line;
    objects.push_back(v);
  }
  ASSERT_EQ(objects.size(), 4u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(objects[s].find("step")->asInt(), s);
    EXPECT_EQ(objects[s].find("loss")->asDouble(), expected[s]) << s;
    EXPECT_GE(objects[s].find("step_ms")->asDouble(), 0.0);
    EXPECT_GT(objects[s].find("tokens_per_s")->asDouble(), 0.0);
  }
  const JsonValue &summary = objects[3];
  EXPECT_TRUE(summary.find("summary")->asBool());
  EXPECT_EQ(summary.find("steps")->asInt(), 3);
  EXPECT_NEAR(summary.find("mean_loss")->asDouble(),
              (expected[0] + expected[1] + expected[2]) / 3, 1e-9);
  const JsonValue &rank = summary.find("ranks")->items().at(0);
  EXPECT_EQ(rank.find("rank")->asInt(), 0);
  EXPECT_EQ(rank.find("predicted_peak_bytes")->asInt(),
            static_cast<int64_t>(ex->arenaBytes()));
  EXPECT_EQ(rank.find("peak_bytes")->asInt(),
            static_cast<int64_t>(ex->peakTensorBytes()));
  EXPECT_GT(rank.find("rss_peak_bytes")->asInt(), 0);
  // Evaluation: the model state is the parameters. The hand-built program
  // carries no predictions, so none are reported.
  int64_t paramBytes = 0;
  for (const ParamView &p : ex->params())
    paramBytes += ex->bufferNumel(p.buffer) * 4;
  EXPECT_EQ(rank.find("model_state_bytes")->asInt(), paramBytes);
  EXPECT_EQ(rank.find("predicted_model_state_bytes"), nullptr);
  EXPECT_EQ(rank.find("predicted_sent_bytes_per_step"), nullptr);
  for (const char *kind :
       {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send"})
    EXPECT_EQ(rank.find("sent_bytes_per_step")->find(kind)->asInt(), 0) << kind;

  // Trace: per step one data span and one event per instruction.
  JsonValue tr;
  ASSERT_TRUE(parseJson(readText(trace), tr).ok());
  const auto &events = tr.find("traceEvents")->items();
  ASSERT_EQ(events.size(), 3u * 16u);
  int dataEvents = 0;
  for (const JsonValue &e : events) {
    EXPECT_EQ(e.find("ph")->asString(), "X");
    EXPECT_EQ(e.find("pid")->asInt(), 0);
    EXPECT_EQ(e.find("tid")->asInt(), 0);
    EXPECT_GE(e.find("dur")->asDouble(), 0.0);
    const bool data = e.find("cat")->asString() == "data";
    dataEvents += data;
    // An instruction's event names its opcode (what trace_breakdown.py
    // sums by); a batch load has none.
    const JsonValue *args = e.find("args");
    EXPECT_EQ(args == nullptr, data);
    if (args) {
      EXPECT_FALSE(args->find("op")->asString().empty());
    }
  }
  EXPECT_EQ(dataEvents, 3);
  EXPECT_EQ(events[1].find("name")->asString(), "wte");
  EXPECT_EQ(events[1].find("cat")->asString(), "compute");
  EXPECT_EQ(events[1].find("args")->find("op")->asString(), "Embedding");

  // Checkpoint: the seed-7 weights; loading it with another seed gives the
  // same first loss.
  SafetensorsFile file;
  ASSERT_TRUE(readSafetensors(ckpt, file).ok());
  EXPECT_EQ(file.tensors.size(), 16u);
  ASSERT_EQ(runLoomRun(program + " --data=" + data + " --steps=1 --seed 99 " +
                           "--quiet --log-json " + log + " --load-checkpoint " +
                           ckpt,
                       &out, &err),
            0)
      << err;
  EXPECT_EQ(out, ""); // --quiet
  JsonValue first;
  std::istringstream again(readText(log));
  std::getline(again, line);
  ASSERT_TRUE(parseJson(line, first).ok());
  EXPECT_EQ(first.find("loss")->asDouble(), expected[0]);
}

/// Expects exit code 1 and one error line containing `needle` first.
void expectError(const std::string &args, const std::string &needle,
                 bool usage = false) {
  std::string out, err;
  EXPECT_EQ(runLoomRun(args, &out, &err), 1) << args;
  EXPECT_EQ(err.rfind("loom-run: error: ", 0), 0u) << err;
  const std::string first = err.substr(0, err.find('\n'));
  EXPECT_NE(first.find(needle), std::string::npos)
      << "args: " << args << "\nstderr: " << err;
  EXPECT_EQ(err.find("usage: loom-run") != std::string::npos, usage) << err;
}

TEST_F(LoomRun, UserErrors) {
  expectError("", "missing PROGRAM", true);
  expectError(program + " --steps 2", "missing --data", true);
  expectError(program + " --data " + data, "missing --steps", true);
  expectError(program + " --data " + data + " --steps zero",
              "--steps expects a non-negative integer", true);
  expectError(program + " --data " + data + " --steps 0",
              "--steps must be at least 1 for an evaluation program");
  expectError(program + " --data " + data + " --steps 1 --lr fast",
              "--lr expects a non-negative number", true);
  expectError(program + " --data " + data + " --steps 1 --min-lr -1",
              "--min-lr expects a non-negative number", true);
  expectError(program + " --data " + data + " --steps 1 --lr-schedule step",
              "--lr-schedule expects constant, cosine, linear or wsd", true);
  expectError(program + " --data " + data + " --steps 1 --decay-fraction 0.3",
              "--decay-fraction shapes --lr-schedule wsd (the schedule is "
              "cosine); add --lr-schedule wsd or drop it",
              true);
  expectError(program + " --data " + data +
                  " --steps 1 --lr-schedule wsd --decay-fraction 1.5",
              "--decay-fraction expects a share in (0, 1]", true);
  expectError(program + " --data " + data + " --steps 1 --time-limit 0",
              "--time-limit expects minutes > 0, got '0'", true);
  expectError(program + " --sample 3 --prompt hi --time-limit 5",
              "--sample runs no steps; drop --time-limit", true);
  expectError(program + " --data " + data + " --steps 1 --warmup x",
              "--warmup expects", true);
  expectError(program + " --data " + data + " --steps 1 --bogus",
              "unknown flag '--bogus'", true);
  expectError(program + " --data", "--data needs a value", true);
  expectError(program + " --data " + data + " --steps 1 --seed -4",
              "--seed expects", true);

  expectError(tempPath("absent.loom") + " --data " + data + " --steps 1",
              "cannot open program");
  const std::string corrupt = tempPath("corrupt.loom");
  std::string bytes = readText(program);
  bytes[bytes.size() / 2] ^= 0x40;
  writeText(corrupt, bytes);
  expectError(corrupt + " --data " + data + " --steps 1", "checksum mismatch");
  writeText(corrupt, bytes.substr(0, 100));
  expectError(corrupt + " --data " + data + " --steps 1", "truncated");
  writeText(corrupt, "hello");
  expectError(corrupt + " --data " + data + " --steps 1", "not a Loom program");

  expectError(program + " --data " + tempPath("absent.bin") + " --steps 1",
              "cannot open token file");
  const std::string wide = tempPath("wide.bin");
  ASSERT_TRUE(writeTokenFile(wide, std::vector<int32_t>(40, 60)).ok());
  expectError(program + " --data " + wide + " --steps 1", "60");
  expectError(program + " --data " + data + " --steps 1 --stage 2",
              "has no stage 2");
  expectError(program + " --data " + data + " --steps 1 --load-checkpoint " +
                  tempPath("absent.st"),
              "absent.st");
  expectError(program + " --data " + data + " --steps 1 --log-json " +
                  "/nonexistent/dir/log.jsonl",
              "cannot create --log-json file");

  // A program that uses a collective.
  auto p = miniGpt();
  p->stages[0]->instructions[6]->opcode = fb::Opcode::AllReduce;
  writeText(corrupt, serialize(*p));
  expectError(corrupt + " --data " + data + " --steps 1",
              "instruction #6 'h.0.res1' (AllReduce): collectives need a "
              "device mesh");
}

//===----------------------------------------------------------------------===//
// Training programs
//===----------------------------------------------------------------------===//

/// The JSON objects of a log file, one per line.
std::vector<JsonValue> readLog(const std::string &path) {
  std::istringstream lines(readText(path));
  std::string line;
  std::vector<JsonValue> objects;
  while (std::getline(lines, line)) {
    JsonValue v;
    Status s = parseJson(line, v);
    EXPECT_TRUE(s.ok()) << s.toString() << ": " << line;
    objects.push_back(v);
  }
  return objects;
}

TEST_F(LoomRun, TrainingLogsScheduleAndResumesBitwise) {
  MiniGptTrainOptions o;
  o.microbatches = 2;
  const std::string train = tempPath("train.loom");
  writeText(train, serialize(*miniGptTrain({}, o)));
  const std::string common = " --data " + data +
                             " --lr 1e-2 --min-lr 1e-3 --warmup 1 "
                             "--schedule-steps 4 --quiet --log-json ";
  const std::string l1 = tempPath("l1.jsonl"), l2 = tempPath("l2.jsonl"),
                    l3 = tempPath("l3.jsonl"), a = tempPath("a.safetensors"),
                    b = tempPath("b.safetensors"),
                    c = tempPath("c.safetensors");
  std::string out, err;
  // 4 uninterrupted steps; 2 steps, save, load (another seed), 2 more.
  ASSERT_EQ(runLoomRun(train + " --steps 4 --seed 3" + common + l1 +
                           " --save-checkpoint " + a,
                       &out, &err),
            0)
      << err;
  ASSERT_EQ(runLoomRun(train + " --steps 2 --seed 3" + common + l2 +
                           " --save-checkpoint " + b,
                       &out, &err),
            0)
      << err;
  ASSERT_EQ(runLoomRun(train + " --steps 2 --seed 99" + common + l3 +
                           " --load-checkpoint " + b + " --save-checkpoint " +
                           c,
                       &out, &err),
            0)
      << err;
  const auto log1 = readLog(l1), log2 = readLog(l2), log3 = readLog(l3);
  ASSERT_EQ(log1.size(), 5u);
  ASSERT_EQ(log2.size(), 3u);
  ASSERT_EQ(log3.size(), 3u);
  LrSchedule schedule;
  schedule.lr = 1e-2;
  schedule.minLr = 1e-3;
  schedule.warmup = 1;
  schedule.totalSteps = 4;
  for (int s = 0; s < 4; ++s) {
    const JsonValue &line = log1[s];
    const JsonValue &again = s < 2 ? log2[s] : log3[s - 2];
    EXPECT_EQ(line.find("step")->asInt(), s);
    EXPECT_EQ(again.find("step")->asInt(), s);
    EXPECT_EQ(line.find("lr")->asDouble(), schedule.at(s)) << s;
    EXPECT_EQ(again.find("lr")->asDouble(), schedule.at(s)) << s;
    EXPECT_EQ(again.find("loss")->asDouble(), line.find("loss")->asDouble())
        << s;
    EXPECT_EQ(again.find("grad_norm")->asDouble(),
              line.find("grad_norm")->asDouble())
        << s;
    EXPECT_GT(line.find("grad_norm")->asDouble(), 0.0);
    EXPECT_GE(line.find("step_ms")->asDouble(), 0.0);
    EXPECT_GT(line.find("tokens_per_s")->asDouble(), 0.0);
  }
  EXPECT_LT(log1[3].find("loss")->asDouble(), log1[0].find("loss")->asDouble());
  EXPECT_EQ(log1[4].find("steps")->asInt(), 4);

  // The same steps in process: identical losses.
  {
    fb::LoadedProgram loaded;
    ASSERT_TRUE(fb::loadProgramFile(train, loaded).ok());
    std::unique_ptr<Executor> ex;
    ASSERT_TRUE(Executor::create(loaded, 0, 3, ex).ok());
    TokenDataConfig cfg;
    cfg.batchSize = 2;
    cfg.seqLen = 8;
    cfg.vocabSize = 50;
    std::unique_ptr<TokenDataLoader> loader;
    ASSERT_TRUE(TokenDataLoader::open(data, cfg, loader).ok());
    std::vector<int32_t> in(16), tg(16);
    for (int s = 0; s < 4; ++s) {
      ASSERT_TRUE(loader->loadBatch(s, in.data(), tg.data()).ok());
      TrainStepResult r;
      ASSERT_TRUE(ex->trainStep(in.data(), tg.data(), s + 1,
                                static_cast<float>(schedule.at(s)), r)
                      .ok());
      EXPECT_EQ(log1[s].find("loss")->asDouble(), r.loss) << s;
      EXPECT_EQ(log1[s].find("grad_norm")->asDouble(), r.gradNorm) << s;
    }
  }

  // Checkpoints: weights + moments, the step count; resumed == uninterrupted.
  SafetensorsFile fa, fb_, fc;
  ASSERT_TRUE(readSafetensors(a, fa).ok());
  ASSERT_TRUE(readSafetensors(b, fb_).ok());
  ASSERT_TRUE(readSafetensors(c, fc).ok());
  EXPECT_EQ(fa.tensors.size(), 48u);
  EXPECT_EQ(fa.metadata["step"], "4");
  EXPECT_EQ(fb_.metadata["step"], "2");
  EXPECT_EQ(fc.metadata["step"], "4");
  EXPECT_EQ(fa.metadata["producer"], "loom");
  EXPECT_EQ(fa.metadata["format"], "pt");
  ASSERT_TRUE(fa.find("optimizer.exp_avg.h.0.mlp.c_fc.weight"));
  ASSERT_TRUE(fa.find("optimizer.exp_avg_sq.wte.weight"));
  ASSERT_EQ(fc.tensors.size(), fa.tensors.size());
  for (const SafeTensor &t : fa.tensors) {
    const SafeTensor *u = fc.find(t.name);
    ASSERT_TRUE(u) << t.name;
    EXPECT_EQ(u->shape, t.shape) << t.name;
    EXPECT_TRUE(u->data == t.data) << t.name << " differs after resuming";
  }

  // A weights-only checkpoint starts at step 0 with zero moments.
  SafetensorsFile weights;
  for (const SafeTensor &t : fb_.tensors)
    if (t.name.rfind("optimizer.", 0) != 0)
      weights.tensors.push_back(t);
  const std::string w = tempPath("w.safetensors"), l4 = tempPath("l4.jsonl");
  ASSERT_TRUE(writeSafetensors(w, weights).ok());
  ASSERT_EQ(
      runLoomRun(train + " --steps 1" + common + l4 + " --load-checkpoint " + w,
                 &out, &err),
      0)
      << err;
  EXPECT_EQ(readLog(l4)[0].find("step")->asInt(), 0);

  // An evaluation program reads a training checkpoint's weights.
  ASSERT_EQ(runLoomRun(program + " --data " + data + " --steps 1 --quiet " +
                           "--load-checkpoint " + a,
                       &out, &err),
            0)
      << err;

  // Optimizer state for only some parameters is an error.
  SafetensorsFile partial = fa;
  partial.tensors.erase(partial.tensors.begin() + 20);
  ASSERT_TRUE(writeSafetensors(w, partial).ok());
  expectError(train + " --data " + data + " --steps 1 --load-checkpoint " + w,
              "incomplete");
}

TEST_F(LoomRun, ValidatesAndSavesPeriodically) {
  MiniGptTrainOptions o;
  o.microbatches = 2;
  const std::string train = tempPath("train.loom");
  writeText(train, serialize(*miniGptTrain({}, o)));
  const std::string l1 = tempPath("l1.jsonl"), l2 = tempPath("l2.jsonl");
  const std::string saves = tempPath("{step}.safetensors");
  std::string out, err;
  // 5 steps, validated (2 batches) after steps 2, 4 and 5, saved after 2,
  // 4 and 5 (one file each); the same 5 steps without either.
  ASSERT_EQ(runLoomRun(train + " --data " + data + " --steps 5 --seed 3 " +
                           "--lr 1e-2 --val-data " + data +
                           " --eval-every 2 --eval-steps 2 --save-every 2 " +
                           "--save-checkpoint " + saves + " --log-json " + l1,
                       &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("validation after step 2 | val loss "), std::string::npos)
      << out;
  ASSERT_EQ(runLoomRun(train + " --data " + data +
                           " --steps 5 --seed 3 --lr 1e-2 --quiet --log-json " +
                           l2,
                       &out, &err),
            0)
      << err;
  const auto log1 = readLog(l1), log2 = readLog(l2);
  std::vector<std::pair<int64_t, double>> validations;
  std::vector<double> losses1, losses2;
  for (const JsonValue &line : log1)
    if (const JsonValue *v = line.find("val_loss");
        v && !line.find("summary")) {
      validations.push_back({line.find("step")->asInt(), v->asDouble()});
      EXPECT_EQ(line.find("val_batches")->asInt(), 2);
    } else if (const JsonValue *l = line.find("loss"))
      losses1.push_back(l->asDouble());
  for (const JsonValue &line : log2)
    if (const JsonValue *l = line.find("loss"))
      losses2.push_back(l->asDouble());
  // Validating changes nothing in the training.
  EXPECT_EQ(losses1, losses2);
  ASSERT_EQ(validations.size(), 3u);
  EXPECT_EQ(validations[0].first, 2);
  EXPECT_EQ(validations[1].first, 4);
  EXPECT_EQ(validations[2].first, 5);
  EXPECT_EQ(log1.back().find("val_loss")->asDouble(), validations[2].second);

  // In process: each saved state's forward loss on validation batches 0
  // and 1 is the logged figure, and evaluating leaves the weights and
  // moments as they were.
  fb::LoadedProgram loaded;
  ASSERT_TRUE(fb::loadProgramFile(train, loaded).ok());
  TokenDataConfig cfg;
  cfg.batchSize = 2;
  cfg.seqLen = 8;
  cfg.vocabSize = 50;
  std::unique_ptr<TokenDataLoader> loader;
  ASSERT_TRUE(TokenDataLoader::open(data, cfg, loader).ok());
  std::vector<int32_t> in(16), tg(16);
  for (const auto &[step, valLoss] : validations) {
    const std::string ckpt = checkpointPathAt(saves, step);
    std::unique_ptr<Executor> ex;
    ASSERT_TRUE(Executor::create(loaded, 0, 3, ex).ok());
    int64_t loadedStep = 0;
    ASSERT_TRUE(loadCheckpoint(*ex, ckpt, &loadedStep).ok()) << ckpt;
    EXPECT_EQ(loadedStep, step);
    // The model state: every parameter's weights and AdamW moments.
    auto modelState = [&] {
      std::vector<std::vector<uint8_t>> state;
      for (const ParamView &p : ex->params())
        for (int32_t b : {static_cast<int32_t>(p.buffer), p.mBuffer, p.vBuffer})
          if (b >= 0) {
            const uint32_t index = static_cast<uint32_t>(b);
            state.emplace_back(ex->bufferBytes(index));
            EXPECT_TRUE(ex->copyFromBuffer(index, state.back().data(),
                                           state.back().size())
                            .ok());
          }
      return state;
    };
    const auto before = modelState();
    double sum = 0;
    for (int64_t k = 0; k < 2; ++k) {
      ASSERT_TRUE(loader->loadBatch(k, in.data(), tg.data()).ok());
      float loss = 0;
      ASSERT_TRUE(ex->evaluateLoss(in.data(), tg.data(), loss).ok());
      sum += loss;
    }
    EXPECT_EQ(sum / 2, valLoss) << "after step " << step;
    EXPECT_TRUE(modelState() == before) << "after step " << step;
    std::remove(ckpt.c_str());
  }
  expectError(train + " --data " + data + " --steps 1 --eval-every 1",
              "--eval-every needs --val-data F", true);
  expectError(train + " --data " + data + " --steps 1 --eval-steps 1",
              "--eval-steps needs --val-data F", true);
  expectError(train + " --data " + data + " --steps 1 --save-every 1",
              "--save-every needs --save-checkpoint F", true);
  expectError(train + " --data " + data + " --steps 1 --val-data " + data +
                  " --eval-steps 0",
              "--eval-steps expects a step count >= 1", true);
  expectError(train + " --data " + data + " --steps 1 --val-data " +
                  tempPath("absent.bin"),
              "--val-data: cannot open token file");
  expectError(program + " --sample 3 --prompt ' ' --val-data " + data,
              "--sample runs no steps; drop --val-data", true);
}

TEST_F(LoomRun, SummaryReportsModelStateAndTheProgramsPredictions) {
  // Training: each parameter holds its values, gradient and two AdamW
  // moments of its shape, 4 x 4 bytes per element.
  const std::string train = tempPath("train.loom"), l1 = tempPath("l1.jsonl"),
                    l2 = tempPath("l2.jsonl");
  auto p = miniGptTrain();
  int64_t elements = 0;
  for (const auto &param : p->stages[0]->params) {
    int64_t n = 1;
    for (int64_t d : p->stages[0]->buffers[param->buffer]->shape)
      n *= d;
    elements += n;
  }
  writeText(train, serialize(*p));
  std::string out, err;
  ASSERT_EQ(runLoomRun(train + " --data " + data +
                           " --steps 1 --quiet --log-json " + l1,
                       &out, &err),
            0)
      << err;
  const auto log1 = readLog(l1);
  const JsonValue &plain = log1.back().find("ranks")->items().at(0);
  EXPECT_EQ(plain.find("model_state_bytes")->asInt(), 16 * elements);
  EXPECT_EQ(plain.find("predicted_model_state_bytes"), nullptr);
  EXPECT_EQ(plain.find("predicted_sent_bytes_per_step"), nullptr);

  // With predictions in the program, loom-run reports them as they are,
  // next to what it measured.
  setPredictions(*p->stages[0], 12345, {1, 2, 3, 4, 5});
  writeText(train, serialize(*p));
  ASSERT_EQ(runLoomRun(train + " --data " + data +
                           " --steps 1 --quiet --log-json " + l2,
                       &out, &err),
            0)
      << err;
  const auto log2 = readLog(l2);
  const JsonValue &rank = log2.back().find("ranks")->items().at(0);
  EXPECT_EQ(rank.find("model_state_bytes")->asInt(), 16 * elements);
  EXPECT_EQ(rank.find("predicted_model_state_bytes")->asInt(), 12345);
  const JsonValue *predicted = rank.find("predicted_sent_bytes_per_step");
  ASSERT_NE(predicted, nullptr);
  int64_t want = 1;
  for (const char *kind :
       {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send"}) {
    EXPECT_EQ(predicted->find(kind)->asInt(), want++) << kind;
    EXPECT_EQ(rank.find("sent_bytes_per_step")->find(kind)->asInt(), 0) << kind;
  }
}

TEST_F(LoomRun, MixedPrecisionSummaryReportsStagingAndSixteenBytes) {
  // A bf16 training program (bf16 weights and gradients, fp32 masters and
  // moments): 2 + 2 + 4 + 4 + 4 bytes of model state per parameter, and the
  // fp32 staging of bf16 operands reported next to the arena.
  const std::string train = tempPath("train.loom"), l1 = tempPath("l1.jsonl");
  auto p = miniGptTrain();
  makeMixedPrecision(*p);
  int64_t elements = 0;
  for (const auto &param : p->stages[0]->params) {
    int64_t n = 1;
    for (int64_t d : p->stages[0]->buffers[param->buffer]->shape)
      n *= d;
    elements += n;
  }
  writeText(train, serialize(*p));
  std::string out, err;
  ASSERT_EQ(
      runLoomRun(train + " --data " + data + " --steps 2 --log-json " + l1,
                 &out, &err),
      0)
      << err;
  EXPECT_NE(out.find(", bf16 staging "), std::string::npos) << out;
  const auto log = readLog(l1);
  ASSERT_EQ(log.size(), 3u);
  for (int s = 0; s < 2; ++s)
    EXPECT_TRUE(std::isfinite(log[s].find("loss")->asDouble()));
  const JsonValue &rank = log.back().find("ranks")->items().at(0);
  EXPECT_EQ(rank.find("model_state_bytes")->asInt(), 16 * elements);
  const int64_t staging = rank.find("bf16_staging_bytes")->asInt();
  EXPECT_GT(staging, 0);
  EXPECT_GE(rank.find("peak_bytes")->asInt(),
            rank.find("predicted_peak_bytes")->asInt() + staging);
}

TEST_F(LoomRun, TrainingStepsZeroSavesTheInitialModel) {
  const std::string train = tempPath("train.loom"),
                    z = tempPath("z.safetensors");
  writeText(train, serialize(*miniGptTrain()));
  std::string out, err;
  ASSERT_EQ(runLoomRun(train + " --data " + data +
                           " --steps 0 --seed 5 --save-checkpoint " + z,
                       &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("done: 0 steps"), std::string::npos) << out;
  SafetensorsFile f;
  ASSERT_TRUE(readSafetensors(z, f).ok());
  EXPECT_EQ(f.metadata["step"], "0");
  fb::LoadedProgram loaded;
  ASSERT_TRUE(fb::loadProgramFile(train, loaded).ok());
  std::unique_ptr<Executor> ex;
  ASSERT_TRUE(Executor::create(loaded, 0, 5, ex).ok());
  for (const ParamView &p : ex->params()) {
    const SafeTensor *t = f.find(p.name);
    ASSERT_TRUE(t) << p.name;
    ASSERT_EQ(t->data.size(), ex->bufferNumel(p.buffer) * sizeof(float));
    EXPECT_EQ(
        std::memcmp(t->data.data(), ex->bufferData(p.buffer), t->data.size()),
        0)
        << p.name;
    const SafeTensor *m = f.find("optimizer.exp_avg." + p.name);
    ASSERT_TRUE(m) << p.name;
    EXPECT_TRUE(std::all_of(m->data.begin(), m->data.end(),
                            [](uint8_t byte) { return byte == 0; }));
  }

  // Human progress lines of a training run show the lr and grad norm.
  ASSERT_EQ(runLoomRun(train + " --data " + data +
                           " --steps 2 --lr-schedule constant --lr 0.5",
                       &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("step 2/2 | loss "), std::string::npos) << out;
  EXPECT_NE(out.find(" | lr 5.0000e-01 | grad norm "), std::string::npos)
      << out;
}

TEST_F(LoomRun, StopRequestEndsTheRunAfterTheStepInProgress) {
  // The request is already there when the run starts: step 1 completes,
  // the run stops after it and saves its checkpoint (stop_request.h).
  const std::string train = tempPath("train.loom");
  writeText(train, serialize(*miniGptTrain()));
  RunOptions o;
  o.program = train;
  o.data = data;
  o.steps = 5;
  o.quiet = true;
  o.logJson = tempPath("l1.jsonl");
  o.saveCheckpoint = tempPath("{step}.safetensors");
  SingleRankCommunicator comm;
  installStopRequestHandlers();
  std::raise(SIGUSR1);
  EXPECT_EQ(stopRequestSignal(), SIGUSR1);
  RunOutcome outcome;
  Status s = runProgram(o, comm, {}, &outcome);
  resetStopRequest();
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(outcome.stepsRun, 1);
  EXPECT_EQ(outcome.stopSignal, SIGUSR1);
  const auto log = readLog(o.logJson);
  ASSERT_EQ(log.size(), 2u); // step 0, the summary
  EXPECT_EQ(log[0].find("step")->asInt(), 0);
  EXPECT_EQ(log[1].find("steps")->asInt(), 1);
  EXPECT_EQ(log[1].find("stopped_by")->asString(), "SIGUSR1");
  SafetensorsFile f;
  ASSERT_TRUE(readSafetensors(checkpointPathAt(o.saveCheckpoint, 1), f).ok());
  EXPECT_EQ(f.metadata["step"], "1");
  std::remove(checkpointPathAt(o.saveCheckpoint, 1).c_str());

  // Without a request the run goes to its last step and says so.
  EXPECT_EQ(stopRequestSignal(), 0);
  s = runProgram(o, comm, {}, &outcome);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(outcome.stepsRun, 5);
  EXPECT_EQ(outcome.stopSignal, 0);
  EXPECT_EQ(readLog(o.logJson).back().find("stopped_by"), nullptr);
  std::remove(checkpointPathAt(o.saveCheckpoint, 5).c_str());
}

} // namespace

//===----------------------------------------------------------------------===//
// Sampling
//===----------------------------------------------------------------------===//

TEST_F(LoomRun, SampleContinuesThePromptGreedily) {
  // A byte-level bigram model whose checkpoint says "after byte v comes
  // v + 1": the prompt "ab" continues "cdefg".
  const int64_t V = 128;
  const std::string bigram = tempPath("bigram.loom"),
                    ckpt = tempPath("bigram.safetensors");
  auto p = bigramLm(2, 4, V, V);
  writeText(bigram, serialize(*p));
  {
    fb::LoadedProgram loaded;
    ASSERT_TRUE(fb::loadProgramFile(bigram, loaded).ok());
    std::unique_ptr<Executor> ex;
    ASSERT_TRUE(Executor::create(loaded, 0, 1, ex).ok());
    auto *w = static_cast<float *>(ex->bufferData(ex->params()[0].buffer));
    std::fill(w, w + V * V, 0.0f);
    for (int64_t v = 0; v < V; ++v)
      w[v * V + (v + 1) % V] = 1.0f;
    ASSERT_TRUE(saveCheckpoint(*ex, ckpt).ok());
  }
  std::string out, err;
  ASSERT_EQ(runLoomRun(bigram + " --sample 5 --prompt ab --load-checkpoint " +
                           ckpt,
                       &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "abcdefg\n");
  EXPECT_NE(err.find("loom-run: sampling 5 tokens greedily"),
            std::string::npos)
      << err;
  // Printable bytes as-is, others (here DEL = 127 and 0 after it) as '?'.
  ASSERT_EQ(runLoomRun(bigram + " --sample=3 '--prompt=a }' --quiet " +
                           "--load-checkpoint=" + ckpt,
                       &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "a }~??\n");
  EXPECT_EQ(err, "");
  ASSERT_EQ(runLoomRun(bigram + " --sample 0 --prompt x --quiet " +
                           "--load-checkpoint " + ckpt,
                       &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "x\n");

  // The 1-layer GPT from its seed: what the sampler computes in process.
  ASSERT_EQ(runLoomRun(program + " --sample 6 --prompt ' !#' --seed 7 --quiet",
                       &out, &err),
            0)
      << err;
  fb::LoadedProgram loaded;
  ASSERT_TRUE(fb::loadProgramFile(program, loaded).ok());
  std::unique_ptr<Executor> ex;
  ASSERT_TRUE(Executor::create(loaded, 0, 7, ex).ok());
  std::vector<int32_t> tokens = {' ', '!', '#'};
  ASSERT_TRUE(sampleTokens(*ex, tokens, 6).ok());
  EXPECT_EQ(out, renderTokens(tokens) + "\n");
}

TEST_F(LoomRun, SampleErrors) {
  const std::string train = tempPath("train.loom");
  writeText(train, serialize(*miniGptTrain()));
  expectError(train + " --sample 3 --prompt hi",
              "sampling needs an eval program: compile without --train");
  expectError(program + " --sample 3 --prompt ''",
              "the prompt is empty; pass --prompt TEXT");
  // miniGpt's vocabulary has 50 tokens: 'h' (104) is outside it.
  expectError(program + " --sample 3 --prompt hi",
              "prompt byte 0 is 0x68 (token 104), outside the model's "
              "vocabulary of 50 tokens");
  expectError(program + " --sample 3", "--sample needs --prompt TEXT", true);
  expectError(program + " --prompt hi", "--prompt needs --sample N", true);
  expectError(program + " --sample -1 --prompt hi", "--sample expects", true);
  expectError(program + " --sample 3 --prompt ' ' --data " + data,
              "--sample runs no steps; drop --data", true);
  expectError(program + " --sample 3 --prompt ' ' --steps 2",
              "--sample runs no steps; drop --steps", true);
  expectError(program + " --sample 3 --prompt ' ' --save-checkpoint x",
              "drop --save-checkpoint", true);
  expectError(program + " --sample 3 --prompt ' ' --load-checkpoint " +
                  tempPath("absent.st"),
              "absent.st");
  // The prompt as ids, and a tokenizer (bpe_tokenizer.h).
  expectError(program + " --sample 3 --prompt-tokens 5,x",
              "--prompt-tokens item 2 (token ids separated by commas, e.g. "
              "50256,464): --prompt-tokens expects a non-negative integer",
              true);
  expectError(program + " --sample 3 --prompt-tokens 5,,6",
              "--prompt-tokens item 2", true);
  expectError(program + " --sample 3 --prompt-tokens 1,50",
              "--prompt-tokens item 2 is 50, outside the model's 50 tokens");
  expectError(program + " --sample 3 --prompt-tokens 1 --prompt ' '",
              "--prompt and --prompt-tokens both give the prompt; pass one",
              true);
  expectError(program + " --prompt-tokens 1",
              "--prompt-tokens needs --sample N", true);
  expectError(program + " --tokenizer t.bin", "--tokenizer needs --sample N",
              true);
  expectError(program + " --sample 3 --tokenizer " + tempPath("absent.bin"),
              "cannot open tokenizer file");
  // An llm.c tokenizer file of `count` single-byte tokens; version 2 adds
  // "<|endoftext|>" as its last token.
  auto writeTable = [&](const std::string &path, int32_t version,
                        int32_t count) {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240328;
    header[1] = version;
    header[2] = count + (version == 2 ? 1 : 0);
    header[3] = version == 2 ? count : 0;
    std::string bytes(reinterpret_cast<const char *>(header.data()), 1024);
    for (int b = 0; b < count; ++b)
      bytes += std::string(1, '\x01') + static_cast<char>(b);
    if (version == 2)
      bytes += std::string(1, '\x0D') + "<|endoftext|>";
    writeText(path, bytes);
  };
  // The model has 50 tokens: a 257-token table is not its tokenizer.
  const std::string table = tempPath("bytes.tok");
  writeTable(table, 2, 256);
  expectError(program + " --sample 3 --tokenizer " + table,
              "has 257 tokens but the model's vocab_size is 50; pass the "
              "tokenizer its training data was written with");
  // Version 1 names an end-of-text token only for GPT-2's 50257 tokens:
  // with no prompt there is nothing to start from.
  writeTable(table, 1, 40);
  expectError(program + " --sample 3 --tokenizer " + table,
              "names no end-of-text token to start from (a version 1 file "
              "only has one for GPT-2's 50257 tokens); pass --prompt TEXT or "
              "--prompt-tokens IDS");
}

#ifdef LOOM_TEST_MPIEXEC
// loom-run under mpirun -np 2 on a data-parallel program: the same losses as
// the single-rank program on the same global batch, one summary entry and
// one trace file per rank, and a rank's error takes the job down.
TEST_F(LoomRun, DataParallelUnderMpirun) {
  MiniGptDims global;
  global.B = 4;
  MiniGptTrainOptions o;
  o.microbatches = 2;
  const std::string single = tempPath("train.loom"),
                    dp = tempPath("bigram.loom");
  writeText(single, serialize(*miniGptTrain(global, o)));
  MiniGptDims local = global;
  local.B = 2;
  auto par = miniGptTrain(local);
  makeDataParallel(*par, 2);
  writeText(dp, serialize(*par));
  // 4 x 8 tokens per step: a longer token file.
  std::vector<int32_t> tokens(400);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 7 + i / 5) % 50);
  const std::string wide = tempPath("wide.bin");
  ASSERT_TRUE(writeTokenFile(wide, tokens).ok());
  const std::string l1 = tempPath("l1.jsonl"), l2 = tempPath("l2.jsonl"),
                    trace = tempPath("trace.json");
  std::string out, err;
  ASSERT_EQ(runLoomRun(single + " --data " + wide +
                           " --steps 3 --lr 1e-2 --log-json " + l1,
                       &out, &err),
            0)
      << err;
  const std::string mpirun =
      std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") +
      LOOM_TEST_MPIEXEC + " -np 2 --oversubscribe -x OMP_NUM_THREADS=1 " +
      LOOM_RUN_PATH + " ";
  const std::string o2 = tempPath("stdout.txt"), e2 = tempPath("stderr.txt");
  int status = std::system((mpirun + dp + " --data " + wide +
                            " --steps 3 --lr 1e-2 --log-json " + l2 +
                            " --trace " + trace + " >" + o2 + " 2>" + e2)
                               .c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << readText(o2) << readText(e2);
  std::istringstream a(readText(l1)), b(readText(l2));
  std::string la, lb;
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(std::getline(a, la) && std::getline(b, lb));
    JsonValue ja, jb;
    ASSERT_TRUE(parseJson(la, ja).ok() && parseJson(lb, jb).ok());
    const double x = ja.find("loss")->asDouble(), y = jb.find("loss")->asDouble();
    EXPECT_NEAR(y, x, 1e-5 * std::fabs(x)) << "step " << s;
  }
  ASSERT_TRUE(std::getline(b, lb));
  JsonValue summary;
  ASSERT_TRUE(parseJson(lb, summary).ok()) << lb;
  const JsonValue *ranks = summary.find("ranks");
  ASSERT_TRUE(ranks && ranks->items().size() == 2) << lb;
  for (size_t r = 0; r < 2; ++r) {
    const JsonValue &e = ranks->items()[r];
    EXPECT_EQ(e.find("rank")->asInt(), static_cast<int64_t>(r));
    EXPECT_EQ(e.find("coords")->find("dp")->asInt(), static_cast<int64_t>(r));
    EXPECT_GT(e.find("sent_bytes_per_step")->find("all_reduce")->asInt(), 0);
    EXPECT_GT(e.find("rss_peak_bytes")->asInt(), 0);
  }
  for (int r = 0; r < 2; ++r) {
    const std::string t = tempPath("trace.rank" + std::to_string(r) + ".json");
    const std::string text = readText(t);
    EXPECT_NE(text.find("\"communication\""), std::string::npos) << t;
    std::remove(t.c_str());
  }
  // The single-rank program under mpirun -np 2: a clear error, no hang.
  status = std::system((mpirun + single + " --data " + wide + " --steps 1 >" +
                        o2 + " 2>" + e2)
                           .c_str());
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(readText(e2).find("error: program was compiled for single rank "
                              "(1 rank) but mpirun started 2; use -np 1"),
            std::string::npos)
      << readText(e2);
  EXPECT_NE(readText(e2).find("loom-run: rank "), std::string::npos);
}
#endif
