//===- LoomRunTest.cpp - The loom-run command line, end to end -*- C++ -*-===//
//
// Runs the loom-run binary on a hand-built program and token file: the losses
// it logs equal an in-process Executor run on the same batches, the JSON log
// and trace have the documented shape, and every user error is one
// `loom-run: error:` line with exit code 1.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/executor.h"
#include "runtime/core/json.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/token_data.h"

#include <gtest/gtest.h>

#include <cstdio>
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
    for (const char *name : {"mini.loom", "tokens.bin", "log.jsonl",
                             "trace.json", "out.safetensors", "stdout.txt",
                             "stderr.txt", "corrupt.loom", "wide.bin"})
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
    dataEvents += e.find("cat")->asString() == "data";
  }
  EXPECT_EQ(dataEvents, 3);
  EXPECT_EQ(events[1].find("name")->asString(), "wte");
  EXPECT_EQ(events[1].find("cat")->asString(), "compute");

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
              "--steps must be at least 1", true);
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
              "program uses AllReduce (instruction #6 'h.0.res1')");
}

} // namespace
