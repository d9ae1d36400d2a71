//===- training_run.cpp - One run of a compiled program ---------*- C++ -*-===//
//
// loom-run's driver, moved out of the tool so the device-memory check
// (test/runtime/GuardedRun.cpp) drives the very same run on another
// backend. Every host access to buffers goes through the executor's
// BufferMemory (the tokens through Executor::trainStep / evaluate, the
// checkpoint and sampler through copyToBuffer / copyFromBuffer), and every
// collective on host values through the communicator's *Host calls.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/training_run.h"

#include "runtime/core/bpe_tokenizer.h"
#include "runtime/core/checkpoint.h"
#include "runtime/core/executor.h"
#include "runtime/core/instruction_cost.h"
#include "runtime/core/json.h"
#include "runtime/core/lr_schedule.h"
#include "runtime/core/model_flops.h"
#include "runtime/core/sampler.h"
#include "runtime/core/sampling_contexts.h"
#include "runtime/core/stop_request.h"
#include "runtime/core/token_data.h"
#include "runtime/core/trace.h"
#include "runtime/core/utf8.h"
#include "runtime/program/program.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <sys/resource.h>
#include <tuple>
#include <vector>

namespace loom {

namespace {

/// A line-oriented JSON log (one object per line, flushed each line).
class JsonLog {
public:
  ~JsonLog() {
    if (file)
      std::fclose(file);
  }
  Status open(const std::string &path) {
    file = std::fopen(path.c_str(), "w");
    LOOM_CHECK(file, "cannot create --log-json file '"
                         << path << "': " << std::strerror(errno));
    name = path;
    return Status::success();
  }
  Status write(const JsonValue &v) {
    if (!file)
      return Status::success();
    const std::string line = writeJson(v) + "\n";
    LOOM_CHECK(std::fwrite(line.data(), 1, line.size(), file) == line.size() &&
                   std::fflush(file) == 0,
               "cannot write --log-json file '" << name << "' (disk full?)");
    return Status::success();
  }
  Status close() {
    if (!file)
      return Status::success();
    const bool ok = std::fclose(file) == 0;
    file = nullptr;
    LOOM_CHECK(ok, "cannot write --log-json file '" << name << "'");
    return Status::success();
  }

private:
  std::FILE *file = nullptr;
  std::string name;
};

std::string formatSeconds(double s) {
  char buf[32];
  if (s < 100)
    std::snprintf(buf, sizeof(buf), "%.1fs", s);
  else
    std::snprintf(buf, sizeof(buf), "%.0fs", s);
  return buf;
}

std::string formatBytes(uint64_t bytes) {
  char buf[32];
  if (bytes < (1u << 20))
    std::snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024.0);
  else if (bytes < (1ull << 30))
    std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / 1048576.0);
  else
    std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

/// `v` as printed in the progress lines ("nan", "inf" without a sign bit's
/// "-nan").
std::string formatNumber(double v) {
  if (std::isnan(v))
    return "nan";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

uint64_t rssPeakBytes() {
  struct rusage ru;
  if (::getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024; // Linux: kilobytes
}

/// "N tok/s[, MFU x%][ after the first step]" (the first step left out of
/// a run of several), or "no steps timed" for a run of none.
std::string throughputText(int64_t stepsRun, double tokPerSec, double mfu) {
  if (stepsRun <= 0)
    return "no steps timed";
  char text[128];
  std::snprintf(text, sizeof text, "%.0f tok/s", tokPerSec);
  std::string out = text;
  if (mfu > 0) {
    std::snprintf(text, sizeof text, ", MFU %.2f%%", 100 * mfu);
    out += text;
  }
  return out + (stepsRun > 1 ? " after the first step" : "");
}

/// The executor of stage `opts.stage` on `backend`'s kernels and memory
/// (the CPU defaults when it is empty); `comm` may be null (sampling).
Status createExecutor(const program::LoadedProgram &loaded,
                      const RunOptions &opts, Communicator *comm,
                      const ExecutorBackendFactory &backend,
                      std::unique_ptr<Executor> &ex,
                      Executor::ParamStart start) {
  std::unique_ptr<KernelBackend> kernels;
  std::unique_ptr<BufferMemory> memory;
  if (backend)
    LOOM_RETURN_IF_ERROR(backend(kernels, memory));
  return Executor::create(loaded, opts.stage, opts.seed, ex, comm,
                          std::move(kernels), std::move(memory), start);
}

/// A checkpoint overwrites every parameter: the seeded init is skipped.
Executor::ParamStart paramStart(const RunOptions &opts) {
  return opts.loadCheckpoint.empty() ? Executor::ParamStart::Seeded
                                     : Executor::ParamStart::Loaded;
}

/// The ids sampling starts from: --prompt-tokens; --prompt's bytes, or its
/// encoding by the tokenizer; or the tokenizer's end-of-text token.
Status samplingPrompt(const RunOptions &opts, const BpeTokenizer *tokenizer,
                      int64_t modelVocab, std::vector<int32_t> &tokens) {
  if (!opts.promptTokens.empty()) {
    tokens = opts.promptTokens;
    const int64_t limit =
        tokenizer ? std::min(modelVocab, tokenizer->vocabSize()) : modelVocab;
    for (size_t i = 0; i < tokens.size(); ++i)
      LOOM_CHECK(
          tokens[i] < limit,
          "--prompt-tokens item "
              << i + 1 << " is " << tokens[i] << ", outside the "
              << (tokenizer && limit < modelVocab ? "tokenizer's " : "model's ")
              << limit << " tokens");
    return Status::success();
  }
  if (!tokenizer)
    return promptTokens(opts.prompt, modelVocab, tokens);
  if (!opts.hasPrompt) {
    LOOM_CHECK(tokenizer->endOfText() >= 0,
               "tokenizer file '"
                   << tokenizer->path()
                   << "' names no end-of-text token to start from (a "
                      "version 1 file only has one for GPT-2's 50257 "
                      "tokens); pass --prompt TEXT or --prompt-tokens IDS");
    tokens = {tokenizer->endOfText()};
    return Status::success();
  }
  LOOM_CHECK(!opts.prompt.empty(), "the prompt is empty; pass --prompt TEXT "
                                   "with at least one character (or drop it "
                                   "to start from the end-of-text token)");
  return tokenizer->encode(opts.prompt, tokens).withContext("--prompt");
}

} // namespace

Status runSample(const RunOptions &opts,
                 const ExecutorBackendFactory &backend) {
  program::LoadedProgram loaded;
  LOOM_RETURN_IF_ERROR(program::loadProgramFile(opts.program, loaded));
  std::unique_ptr<Executor> ex;
  LOOM_RETURN_IF_ERROR(
      createExecutor(loaded, opts, nullptr, backend, ex, paramStart(opts)));
  SamplerLayout layout;
  LOOM_RETURN_IF_ERROR(findSamplerLayout(*ex, layout)
                           .withContext("program '" + opts.program + "'"));
  const int64_t modelVocab = ex->model().vocab_size();
  std::unique_ptr<BpeTokenizer> tokenizer;
  SamplingConfig sampling = opts.sampling();
  if (!opts.tokenizer.empty()) {
    tokenizer = std::make_unique<BpeTokenizer>();
    LOOM_RETURN_IF_ERROR(BpeTokenizer::load(opts.tokenizer, *tokenizer));
    // A model may pad its vocabulary past the tokenizer's (nanoGPT's 50304
    // for GPT-2's 50257): the padding ids are never drawn. A tokenizer with
    // more tokens than the model is not the one its data was written with.
    LOOM_CHECK(tokenizer->vocabSize() <= modelVocab,
               "tokenizer file '"
                   << opts.tokenizer << "' has " << tokenizer->vocabSize()
                   << " tokens but the model's vocab_size is " << modelVocab
                   << "; pass the tokenizer its training data was written "
                      "with (its size is at most vocab_size)");
    sampling.vocabLimit = tokenizer->vocabSize();
  }
  std::vector<int32_t> tokens;
  LOOM_RETURN_IF_ERROR(
      samplingPrompt(opts, tokenizer.get(), modelVocab, tokens));
  const size_t promptLength = tokens.size();
  JsonLog log;
  if (!opts.logJson.empty())
    LOOM_RETURN_IF_ERROR(log.open(opts.logJson));
  std::unique_ptr<SamplingContexts> contexts;
  LOOM_RETURN_IF_ERROR(SamplingContexts::create(
      *ex, opts.contextPrograms,
      [&](const program::LoadedProgram &program,
          std::unique_ptr<Executor> &created) {
        // The weights are copied in from `ex`: no seeded init.
        return createExecutor(program, opts, nullptr, backend, created,
                              Executor::ParamStart::Loaded);
      },
      contexts));
  if (!opts.loadCheckpoint.empty())
    LOOM_RETURN_IF_ERROR(loadCheckpoint(*ex, opts.loadCheckpoint));
  if (!opts.quiet) {
    // Progress goes to stderr: stdout holds only the text.
    const std::string weights =
        opts.loadCheckpoint.empty()
            ? "initial weights, seed " + std::to_string(opts.seed)
            : opts.loadCheckpoint;
    std::string how = "greedily";
    if (opts.temperature > 0) {
      char text[96];
      std::snprintf(
          text, sizeof(text), "at temperature %g%s, seed %" PRIu64,
          opts.temperature,
          opts.topK > 0 ? (", top-k " + std::to_string(opts.topK)).c_str() : "",
          opts.seed);
      how = text;
    }
    const std::string vocab =
        tokenizer ? "tokenizer " + opts.tokenizer + " (" +
                        std::to_string(tokenizer->vocabSize()) + " tokens)"
                  : "vocab " + std::to_string(layout.vocab) + " (bytes)";
    // With shorter programs: "context 1024 (runs seq 16, 32, ... while
    // shorter)".
    std::string context = std::to_string(layout.seq);
    if (!contexts->seqs().empty()) {
      context += " (runs seq";
      for (int64_t seq : contexts->seqs())
        context += " " + std::to_string(seq) + ",";
      context.back() = ' ';
      context += "while shorter)";
    }
    std::fprintf(stderr,
                 "loom-run: sampling %" PRId64 " tokens %s from %s "
                 "(%s) after %zu prompt tokens, context %s, %s\n",
                 opts.sample, how.c_str(), opts.program.c_str(),
                 weights.c_str(), promptLength, context.c_str(), vocab.c_str());
    std::fflush(stderr);
  }
  std::vector<double> logProbs;
  const int64_t sampleStartNs = steadyNowNs();
  LOOM_RETURN_IF_ERROR(sampleTokens(
      [&](int64_t length, Executor *&chosen) {
        return contexts->executorFor(length, chosen);
      },
      tokens, opts.sample, sampling, &logProbs));
  const double sampleMs = (steadyNowNs() - sampleStartNs) / 1e6;
  std::string text;
  if (tokenizer) {
    // The end-of-text token sampling started from unasked is not shown.
    const bool implicitStart = !opts.hasPrompt && opts.promptTokens.empty();
    const std::vector<int32_t> shown(tokens.begin() + (implicitStart ? 1 : 0),
                                     tokens.end());
    // As tiktoken's decode (errors="replace"): a character cut between
    // tokens, or ids that spell no character, show as U+FFFD.
    LOOM_RETURN_IF_ERROR(tokenizer->decode(shown, text));
    text = replaceIllFormedUtf8(text);
  } else {
    text = renderTokens(tokens);
  }
  if (!opts.logJson.empty()) {
    auto ids = [&](size_t from, size_t to) {
      JsonValue list = JsonValue::array();
      for (size_t i = from; i < to; ++i)
        list.push(JsonValue::integer(tokens[i]));
      return list;
    };
    JsonValue record = JsonValue::object();
    record.set("prompt_tokens", ids(0, promptLength));
    record.set("tokens", ids(promptLength, tokens.size()));
    JsonValue logProbList = JsonValue::array();
    for (double lp : logProbs)
      logProbList.push(JsonValue::number(lp));
    record.set("logprobs", std::move(logProbList));
    record.set("text", JsonValue::string(text));
    // The sampling loop alone (program load and checkpoint read excluded).
    record.set("sample_ms", JsonValue::number(sampleMs));
    LOOM_RETURN_IF_ERROR(log.write(record));
    LOOM_RETURN_IF_ERROR(log.close());
  }
  text += "\n";
  LOOM_CHECK(std::fwrite(text.data(), 1, text.size(), stdout) == text.size() &&
                 std::fflush(stdout) == 0,
             "cannot write the sampled text to stdout");
  return Status::success();
}

namespace {

/// What `after` counted beyond `before`, and the sum of two counts (what
/// checkpoints and validations send between steps is not a step's).
CommStats statsSince(const CommStats &before, const CommStats &after) {
  CommStats d;
  for (int k = 0; k < kNumCommKinds; ++k) {
    d.sentBytes[k] = after.sentBytes[k] - before.sentBytes[k];
    d.calls[k] = after.calls[k] - before.calls[k];
  }
  d.commNs = after.commNs - before.commNs;
  return d;
}
void addStats(CommStats &to, const CommStats &d) {
  for (int k = 0; k < kNumCommKinds; ++k) {
    to.sentBytes[k] += d.sentBytes[k];
    to.calls[k] += d.calls[k];
  }
  to.commNs += d.commNs;
}

/// "F.json" -> "F.rank<r>.json" ("F" -> "F.rank<r>").
std::string rankPath(const std::string &path, int rank) {
  const std::string tag = ".rank" + std::to_string(rank);
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

} // namespace

Status runProgram(const RunOptions &optsIn, Communicator &comm,
                  const ExecutorBackendFactory &backend, RunOutcome *outcome) {
  RunOptions opts = optsIn;
  const bool multi = comm.size() > 1;
  const bool lead = comm.rank() == 0;
  if (!lead)
    opts.quiet = true;
  // 1. Program and executor.
  program::LoadedProgram loaded;
  LOOM_RETURN_IF_ERROR(program::loadProgramFile(opts.program, loaded));
  LOOM_RETURN_IF_ERROR(comm.setMesh(programMesh(*loaded.root())));
  if (multi && loaded.root()->stages()->size() > 1 && comm.axisSize("pp") > 1)
    opts.stage = static_cast<uint32_t>(comm.coordOn("pp"));
  std::unique_ptr<Executor> ex;
  LOOM_RETURN_IF_ERROR(
      createExecutor(loaded, opts, &comm, backend, ex, paramStart(opts)));
  const program::ModelInfo &model = ex->model();
  const program::Stage &stage = ex->stage();
  const bool training = ex->isTraining();
  const double flopsPerToken = trainingFlopsPerToken(*loaded.root());
  const int64_t B = model.batch(), T = model.seq();
  const int64_t localB = ex->localBatch();
  LOOM_CHECK(training || opts.steps >= 1,
             "--steps must be at least 1 for an evaluation program (0 only "
             "initializes a training program)");
  LOOM_CHECK(stage.loss() >= 0 || ex->isPipelined(),
             "stage " << opts.stage
                      << " has no loss buffer; loom-run evaluates the loss, "
                         "which the last pipeline stage computes");
  // A training (or pipelined evaluation) stage's tokens hold one
  // micro-batch of the global batch.
  const bool pipelined = ex->isPipelined();
  const int64_t M = training || pipelined ? stage.microbatches() : 1;
  for (const auto &[index, what] :
       {std::pair<int32_t, const char *>{stage.tokens(), "tokens"},
        {stage.targets(), "targets"}})
    if (index >= 0)
      LOOM_CHECK(ex->bufferNumel(index) == localB / M * T,
                 "program '"
                     << opts.program << "': the " << what << " buffer "
                     << program::shapeString(ex->bufferShape(index))
                     << " does not hold batch" << (localB != B ? " / dp" : "")
                     << (M > 1 ? " / microbatches" : "")
                     << " x seq = " << localB / M << " x " << T << " tokens");
  LOOM_CHECK(
      training || (opts.saveEvery < 0 && opts.valData.empty() && !opts.shuffle),
      "program '" << opts.program << "' is an evaluation program: "
                  << (opts.saveEvery >= 0
                          ? "--save-every saves a training run's "
                            "progress (its weights do not change)"
                      : opts.shuffle ? "--shuffle orders a training run's "
                                       "samples (an evaluation reads --data's "
                                       "batches in order)"
                                     : "--val-data validates a training run "
                                       "(evaluate --data itself instead)"));
  int64_t startStep = 0; // completed steps of a resumed training run
  // The order a training run reads --data in, kept in its checkpoints: a
  // resumed run that reads in another order still trains, but no longer
  // continues the interrupted run's batches, which it is told.
  std::map<std::string, std::string> runMetadata;
  if (training)
    runMetadata["data_order"] =
        opts.shuffle ? "shuffled, seed " + std::to_string(opts.seed)
                     : std::string("in file order");
  if (!opts.loadCheckpoint.empty()) {
    std::map<std::string, std::string> saved;
    LOOM_RETURN_IF_ERROR(
        loadCheckpoint(*ex, opts.loadCheckpoint, &startStep, &saved));
    auto order = saved.find("data_order");
    if (training && lead && order != saved.end() &&
        order->second != runMetadata["data_order"])
      std::fprintf(stderr,
                   "loom-run: note: the run that saved '%s' read --data %s; "
                   "this one reads it %s, so its batches from step %" PRId64
                   " on are not the ones the saved run would have read "
                   "(%s to continue that order)\n",
                   opts.loadCheckpoint.c_str(), order->second.c_str(),
                   runMetadata["data_order"].c_str(), startStep,
                   order->second == "in file order"
                       ? "drop --shuffle"
                       : ("pass --shuffle --seed " +
                          order->second.substr(order->second.rfind(' ') + 1))
                             .c_str());
  }
  LrSchedule schedule;
  schedule.lr = opts.lr;
  schedule.minLr = opts.minLr;
  schedule.warmup = opts.warmup;
  schedule.kind = opts.schedule;
  schedule.decayFraction = opts.decayFraction;
  schedule.totalSteps =
      opts.scheduleSteps >= 0 ? opts.scheduleSteps : startStep + opts.steps;

  // 2. Data, read on the host (and checked there: the buffers may be
  //    device memory) and copied in by the executor; training (and a
  //    pipelined evaluation) reads the global batch, which trainStep
  //    (evaluatePipelined) splits into micro-batches.
  TokenDataConfig dataConfig;
  dataConfig.batchSize = B;
  dataConfig.seqLen = T;
  dataConfig.vocabSize = model.vocab_size();
  dataConfig.dpRank = comm.coordOn("dp");
  dataConfig.dpSize = comm.axisSize("dp");
  TokenDataConfig trainConfig = dataConfig;
  trainConfig.shuffle = opts.shuffle;
  trainConfig.shuffleSeed = opts.seed;
  std::unique_ptr<TokenDataLoader> data;
  LOOM_RETURN_IF_ERROR(TokenDataLoader::open(opts.data, trainConfig, data));
  std::vector<int32_t> hostInputs(static_cast<size_t>(localB * T)),
      hostTargets(static_cast<size_t>(localB * T));
  int32_t *inputs = hostInputs.data(), *targets = hostTargets.data();
  // Validation (--val-data): the same rows of the same batches each time,
  // so the figures of successive validations compare.
  std::unique_ptr<TokenDataLoader> valData;
  int64_t valSteps = 0;
  if (!opts.valData.empty()) {
    LOOM_RETURN_IF_ERROR(
        TokenDataLoader::open(opts.valData, dataConfig, valData)
            .withContext("--val-data"));
    valSteps = opts.evalSteps > 0
                   ? opts.evalSteps
                   : std::min<int64_t>(valData->numBatches(), 100);
  }

  // 3. Outputs.
  JsonLog log;
  if (!opts.logJson.empty() && lead)
    LOOM_RETURN_IF_ERROR(log.open(opts.logJson));
  const int64_t origin = steadyNowNs();
  TraceWriter trace(origin);
  trace.setDevicePeaks(opts.peakTflops, opts.peakGbps);
  std::vector<InstructionTiming> timings;
  // A traced call's FLOPs and bytes (instruction_cost.h), keyed by (list,
  // first instruction, count): the same calls run every step, so each is
  // worked out once.
  std::map<std::tuple<const void *, uint32_t, uint32_t>, InstructionCost>
      callCosts;
  const auto *instructions = stage.instructions();
  const auto *updates = stage.update_instructions();
  if (!opts.quiet) {
    int64_t paramCount = 0;
    for (const ParamView &p : ex->params())
      paramCount += program::shapeNumel(p.localShape);
    const auto *producer = loaded.root()->producer();
    std::printf("loom-run: %s (%s), stage %u: %u instructions, %zu params "
                "(%" PRId64 " values), arena %s, batch %" PRId64
                " x seq %" PRId64 "\n",
                opts.program.c_str(),
                producer ? producer->c_str() : "unknown producer", opts.stage,
                instructions ? instructions->size() : 0u, ex->params().size(),
                paramCount, formatBytes(ex->arenaBytes()).c_str(), B, T);
    if (const program::Pipeline *pipe = stage.pipeline()) {
      uint32_t chunkInstructions = 0;
      for (const program::PipelineChunk *c : *pipe->chunks())
        chunkInstructions += (c->forward() ? c->forward()->size() : 0) +
                             (c->backward() ? c->backward()->size() : 0);
      std::printf("pipeline: %s schedule, %u stages, rank 0 runs %u chunk(s) "
                  "(%u instructions) in %u actions per step\n",
                  pipe->schedule() ? pipe->schedule()->c_str() : "?",
                  pipe->stages(), pipe->chunks()->size(), chunkInstructions,
                  pipe->actions() ? pipe->actions()->size() : 0u);
    }
    if (multi)
      std::printf("ranks: %d (%s, %s communicator); rank 0 holds %" PRId64
                  " rows of each batch\n",
                  comm.size(), meshString(comm.mesh()).c_str(), comm.backend(),
                  localB);
    char decay[64] = "";
    if (schedule.kind == LrSchedule::Kind::WSD)
      std::snprintf(decay, sizeof(decay), " decaying over the last %g%%",
                    100.0 * schedule.decayFraction);
    if (training)
      std::printf("training: %" PRId64 " micro-batch(es) of %" PRId64
                  " rows, %u update instructions, steps %" PRId64 "..%" PRId64
                  ", lr %g (%s%s, warmup %" PRId64 ", min %g, over %" PRId64
                  " steps)\n",
                  M, localB / M, updates ? updates->size() : 0u, startStep,
                  startStep + opts.steps, opts.lr,
                  LrSchedule::name(opts.schedule), decay, opts.warmup,
                  opts.minLr, schedule.totalSteps);
    else if (pipelined)
      std::printf("evaluation: %" PRId64 " micro-batch(es) of %" PRId64
                  " rows through the pipeline (forward only)\n",
                  M, localB / M);
    // What a pattern matched, so that a missing shard shows before step 0.
    auto describeData = [&](const char *what, const std::string &path,
                            const TokenDataLoader &loader, bool shuffled) {
      std::printf("%s: %s: %" PRId64 " tokens in %" PRId64 " file(s), %" PRId64
                  " batches of %" PRId64 " x %" PRId64 "%s\n",
                  what, path.c_str(), loader.tokenCount(), loader.numShards(),
                  loader.numBatches(), B, T,
                  shuffled ? ", sequences shuffled each epoch" : "");
    };
    describeData("data", opts.data, *data, opts.shuffle);
    if (valData)
      describeData("validation data", opts.valData, *valData, false);
    std::fflush(stdout);
  }

  // 4. Steps (numbered from the checkpoint's step count when resuming).
  //    A stop request moves the end to the step it came in.
  int64_t lastStep = startStep + opts.steps;
  // Why the run stops early, agreed on by all ranks: kStopForSignal + the
  // signal, kStopForTimeLimit, or 0. A signal outranks the time limit in
  // the all-reduce (max): it is not a success.
  constexpr int kStopForTimeLimit = 1, kStopForSignal = 1000;
  int stopCode = 0;
  std::vector<uint32_t> everyAxis;
  for (uint32_t a = 0; a < comm.mesh().size(); ++a)
    everyAxis.push_back(a);
  // Counted between steps (periodic checkpoints gather sharded tensors,
  // validations run forwards): not a training step's traffic.
  CommStats betweenSteps;
  double lastValLoss = std::nan("");
  // The mean loss over valSteps validation batches of the weights after
  // `done` steps, logged and printed.
  auto validate = [&](int64_t done) -> Status {
    const int64_t v0 = steadyNowNs();
    double sum = 0;
    for (int64_t k = 0; k < valSteps; ++k) {
      LOOM_RETURN_IF_ERROR(valData->loadBatch(k, inputs, targets));
      float loss = 0;
      LOOM_RETURN_IF_ERROR(
          ex->evaluateLoss(inputs, targets, loss)
              .withContext("validation after step " + std::to_string(done)));
      sum += loss;
    }
    const double ms = (steadyNowNs() - v0) * 1e-6;
    lastValLoss = sum / static_cast<double>(valSteps);
    JsonValue line = JsonValue::object();
    line.set("step", JsonValue::integer(done));
    line.set("val_loss", JsonValue::number(lastValLoss));
    line.set("val_batches", JsonValue::integer(valSteps));
    line.set("val_ms", JsonValue::number(ms));
    LOOM_RETURN_IF_ERROR(log.write(line));
    if (!opts.quiet) {
      std::printf("validation after step %" PRId64 " | val loss %.9g | %" PRId64
                  " batches of %s | %.0f ms\n",
                  done, lastValLoss, valSteps, opts.valData.c_str(), ms);
      std::fflush(stdout);
    }
    return Status::success();
  };
  double lossSum = 0;
  // The run's throughput: its steps after the first (which also warms up
  // the kernels, the allocator and the communicators, as llm.c leaves its
  // first iteration out), or the one step of a one-step run.
  double timedSec = 0, firstSec = 0;
  int64_t pipelineNs = 0, pipelineWaitNs = 0; // a pipeline stage's phase
  int64_t stashPeakBytes = 0; // ... and the activations it stashed at most
  comm.resetStats();
  for (int64_t s = startStep; s < lastStep; ++s) {
    const int64_t t0 = steadyNowNs();
    LOOM_RETURN_IF_ERROR(data->loadBatch(s, inputs, targets));
    const int64_t t1 = steadyNowNs();
    timings.clear();
    std::vector<InstructionTiming> *timed =
        opts.trace.empty() ? nullptr : &timings;
    float loss = 0;
    TrainStepResult result;
    const double lr = schedule.at(s);
    if (training) {
      LOOM_RETURN_IF_ERROR(ex->trainStep(
          inputs, targets, s + 1, static_cast<float>(lr), result, timed));
      loss = result.loss;
      pipelineNs += result.pipelineNs;
      pipelineWaitNs += result.pipelineWaitNs;
      stashPeakBytes = std::max(stashPeakBytes, result.stashPeakBytes);
    } else if (pipelined) {
      // Forward actions only; the loss summed over the pipeline.
      LOOM_RETURN_IF_ERROR(
          ex->evaluatePipelined(inputs, targets, result, timed));
      loss = result.loss;
      pipelineNs += result.pipelineNs;
      pipelineWaitNs += result.pipelineWaitNs;
    } else {
      LOOM_RETURN_IF_ERROR(ex->evaluate(inputs, targets, loss, timed));
    }
    const int64_t t2 = steadyNowNs();
    lossSum += loss;

    if (!opts.trace.empty()) {
      trace.addComplete("load batch " + std::to_string(s), "data", t0, t1,
                        comm.rank());
      for (const InstructionTiming &t : timings) {
        const auto *list = t.update ? updates : instructions;
        if (t.chunk >= 0) {
          const program::PipelineChunk *chunk =
              stage.pipeline()->chunks()->Get(static_cast<uint32_t>(t.chunk));
          list = t.backward ? chunk->backward() : chunk->forward();
        }
        const program::Instruction *ins = list->Get(t.index);
        std::string op = program::opcodeName(ins->opcode());
        std::string name =
            ins->name() && ins->name()->size() ? ins->name()->str() : op;
        if (t.count > 1 && t.update) {
          // An AdamW group (adamw_groups.h): one span, and a row of its own
          // in per-opcode sums (bench/trace_breakdown.py).
          op += " group";
          name = op + ": " + std::to_string(t.count) +
                 " update instructions from '" + name + "' in one call";
        } else if (t.count > 1) {
          // Instructions in one call (gelu_epilogues.h, residual_norms.h,
          // cross_entropy_fusion.h): "Linear+Gelu", "LayerNormGrad+Add",
          // "CrossEntropy+Fill+CrossEntropyGrad", ...
          for (uint32_t k = 1; k < t.count; ++k)
            op += "+" + program::opcodeName(list->Get(t.index + k)->opcode());
          name += " (" + op + " in one call)";
        }
        const bool collective = program::isCollective(ins->opcode());
        InstructionCost cost;
        if (!collective) {
          auto [it, added] = callCosts.try_emplace(std::make_tuple(
              static_cast<const void *>(list), t.index, t.count));
          if (added)
            it->second = callCost(stage, *list, t.index, t.count);
          cost = it->second;
        }
        trace.addComplete(name,
                          collective ? "communication"
                          : t.update ? "optimizer"
                                     : "compute",
                          t.startNs, t.endNs, comm.rank(), 0, std::move(op),
                          collective ? -1.0 : cost.flops,
                          collective ? -1 : cost.bytes);
      }
    }
    const double stepSec = (t2 - t0) * 1e-9;
    const double tokPerSec = stepSec > 0 ? B * T / stepSec : 0.0;
    (s == startStep ? firstSec : timedSec) += stepSec;
    JsonValue line = JsonValue::object();
    line.set("step", JsonValue::integer(s));
    line.set("loss", JsonValue::number(loss));
    if (training) {
      line.set("lr", JsonValue::number(lr));
      line.set("grad_norm", JsonValue::number(result.gradNorm));
    }
    line.set("step_ms", JsonValue::number(stepSec * 1e3));
    line.set("tokens_per_s", JsonValue::number(tokPerSec));
    // Every rank's device works on the step: MFU is per device.
    const double mfu = training
                           ? modelFlopsUtilization(flopsPerToken, tokPerSec,
                                                   opts.peakTflops, comm.size())
                           : 0.0;
    if (mfu > 0)
      line.set("mfu", JsonValue::number(mfu));
    LOOM_RETURN_IF_ERROR(log.write(line));
    if (!opts.quiet) {
      const double elapsed = (t2 - origin) * 1e-9;
      const int64_t done = s - startStep + 1;
      const double eta = elapsed / done * (lastStep - s - 1);
      char mfuText[32] = "";
      if (mfu > 0)
        std::snprintf(mfuText, sizeof mfuText, " | MFU %.2f%%", 100 * mfu);
      if (training)
        std::printf("step %" PRId64 "/%" PRId64
                    " | loss %.9g | lr %.4e | grad norm %.4g | %.0f tok/s%s | "
                    "elapsed %s | eta %s\n",
                    s + 1, lastStep, loss, lr, result.gradNorm, tokPerSec,
                    mfuText, formatSeconds(elapsed).c_str(),
                    formatSeconds(eta).c_str());
      else
        std::printf("step %" PRId64 "/%" PRId64
                    " | loss %.9g | %.0f tok/s | elapsed %s | eta %s\n",
                    s + 1, lastStep, loss, tokPerSec,
                    formatSeconds(elapsed).c_str(), formatSeconds(eta).c_str());
      std::fflush(stdout);
    }
    // A diverged run stops here rather than training (and saving) garbage,
    // as Megatron's --check-for-nan-in-loss-and-grad does. Every rank
    // decides alike: the loss and the norm are the same on all of them
    // (all-reduced in the step).
    const bool gradNormKnown = training && stage.grad_norm() >= 0;
    LOOM_CHECK(!training ||
                   (std::isfinite(loss) &&
                    (!gradNormKnown || std::isfinite(result.gradNorm))),
               "step " << s + 1 << ": the loss is " << formatNumber(loss)
                       << (gradNormKnown ? " and the gradient norm " +
                                               formatNumber(result.gradNorm)
                                         : std::string())
                       << ": training diverged, and the weights after this "
                          "step's update cannot be trusted, so the run stops "
                          "without saving them. Lower --lr, lengthen --warmup "
                          "or clip harder (--clip), then resume from the last "
                          "good checkpoint (--save-every N keeps one)");
    // After every --save-every / --eval-every steps (counted from the
    // start of training, as Megatron's --save-interval): the checkpoint
    // first, so a failing validation cannot lose the progress. The last
    // step is validated here too; its save comes after the summary.
    const int64_t done = s + 1;
    const CommStats before = comm.stats();
    // A stop request (stop_request.h) or the --time-limit (Megatron's
    // --exit-duration-in-mins) on any rank ends the run here on all: the
    // reason is all-reduced, so the ranks stop after the same step even
    // when the signal reached them, or their clocks passed the limit, at
    // different times.
    if (done < lastStep) {
      int mine = 0;
      if (int signal = stopRequestSignal())
        mine = kStopForSignal + signal;
      else if (opts.timeLimitMinutes >= 0 &&
               (steadyNowNs() - origin) * 1e-9 >= opts.timeLimitMinutes * 60)
        mine = kStopForTimeLimit;
      float stop = static_cast<float>(mine);
      if (multi)
        LOOM_RETURN_IF_ERROR(comm.allReduceHost(
            &stop, 1, program::DType::F32, program::Reduction::Max, everyAxis));
      if (stop > 0) {
        stopCode = static_cast<int>(stop);
        lastStep = done; // saved below, as after a last step
      }
    }
    if (training && done < lastStep) {
      if (opts.saveEvery > 0 && done % opts.saveEvery == 0)
        LOOM_RETURN_IF_ERROR(
            saveCheckpoint(*ex, checkpointPathAt(opts.saveCheckpoint, done),
                           done, runMetadata));
      if (valData && opts.evalEvery > 0 && done % opts.evalEvery == 0)
        LOOM_RETURN_IF_ERROR(validate(done));
    }
    if (training && valData && done == lastStep && !stopCode)
      LOOM_RETURN_IF_ERROR(validate(done));
    addStats(betweenSteps, statsSince(before, comm.stats()));
  }
  const int64_t stepsRun = lastStep - startStep;

  // 5. Summary (every rank's numbers gathered to all, rank 0 writes),
  //    checkpoint, trace.
  const double meanLoss = stepsRun > 0 ? lossSum / stepsRun : std::nan("");
  // Before the gather below; without what was sent between steps.
  const CommStats stepStats = statsSince(betweenSteps, comm.stats());
  const int64_t steps = std::max<int64_t>(stepsRun, 1);
  // One row of int64 per rank: the fixed fields, then per communication
  // kind the bytes sent, then (when the program carries the compiler's
  // predictions) the predicted ones. Each rank runs its own stage, so the
  // predictions travel with the measurements.
  enum Field {
    kPeak,
    kPredictedPeak,
    kRssPeak,
    kCommNs,
    kModelState,
    kHasPredictions,
    kPredictedModelState,
    kPipelineNs,         // a pipeline stage: micro-batch phase, all steps
    kPipelineWaitNs,     // ... and the time it waited for its neighbours
    kPredictedIdlePpm,   // the compiler's idle share, in millionths
    kStashPeak,          // most bytes of stashed activations held at once
    kPredictedStashPeak, // ... as the compiler's timeline predicted (-1)
    kBF16Staging,        // fp32 staging of bf16 operands (in kPeak too)
    kKernelWorkspace,    // the kernels' own buffer memory (not in kPeak)
    kSent,
    kPredictedSent = kSent + kNumCommKinds,
    kNumFields = kPredictedSent + kNumCommKinds
  };
  std::vector<int64_t> mine(kNumFields, 0);
  mine[kPeak] = static_cast<int64_t>(ex->peakTensorBytes());
  mine[kPredictedPeak] = static_cast<int64_t>(stage.arena_bytes());
  mine[kBF16Staging] = static_cast<int64_t>(ex->bf16StagingBytes());
  mine[kKernelWorkspace] = static_cast<int64_t>(ex->kernelWorkspaceBytes());
  mine[kRssPeak] = static_cast<int64_t>(rssPeakBytes());
  mine[kCommNs] = stepStats.commNs / steps;
  mine[kModelState] = ex->modelStateBytes();
  for (int k = 0; k < kNumCommKinds; ++k)
    mine[kSent + k] = stepStats.sentBytes[k] / steps;
  mine[kPipelineNs] = pipelineNs;
  mine[kPipelineWaitNs] = pipelineWaitNs;
  mine[kStashPeak] = stashPeakBytes;
  mine[kPredictedStashPeak] =
      stage.pipeline() ? stage.pipeline()->predicted_stash_peak_bytes() : -1;
  mine[kPredictedIdlePpm] =
      stage.pipeline() ? static_cast<int64_t>(std::llround(
                             stage.pipeline()->predicted_idle_fraction() * 1e6))
                       : -1;
  if (const program::Predictions *p = stage.predictions()) {
    const program::SentBytes &sent = *p->sent_bytes_per_step(); // verified
    mine[kHasPredictions] = 1;
    mine[kPredictedModelState] = p->model_state_bytes();
    auto predicted = [&](CommKind kind) -> int64_t {
      switch (kind) {
      case CommKind::AllReduce:
        return sent.all_reduce();
      case CommKind::AllGather:
        return sent.all_gather();
      case CommKind::ReduceScatter:
        return sent.reduce_scatter();
      case CommKind::AllToAll:
        return sent.all_to_all();
      case CommKind::Send:
        return sent.send();
      }
      return 0;
    };
    for (int k = 0; k < kNumCommKinds; ++k)
      mine[kPredictedSent + k] = predicted(static_cast<CommKind>(k));
  }
  std::vector<int64_t> all(mine.size() * comm.size());
  LOOM_RETURN_IF_ERROR(comm.allGatherHost(mine.data(), all.data(),
                                          static_cast<int64_t>(mine.size()) * 2,
                                          program::DType::I32, everyAxis));
  auto perKind = [](const int64_t *bytes) {
    JsonValue kinds = JsonValue::object();
    for (int k = 0; k < kNumCommKinds; ++k)
      kinds.set(commKindName(static_cast<CommKind>(k)),
                JsonValue::integer(bytes[k]));
    return kinds;
  };
  // A pipeline's step lasts as long as its slowest stage's phase: the
  // stages start each step together (the previous step ends with the loss
  // all-reduce over pp), so a stage that finishes early idles until then,
  // as in the simulated timeline. Summed over the steps.
  int64_t pipelineSpanNs = 0;
  for (int r = 0; r < comm.size(); ++r)
    pipelineSpanNs =
        std::max(pipelineSpanNs, all[r * mine.size() + kPipelineNs]);
  std::vector<JsonValue> rankEntries;
  for (int r = 0; r < comm.size(); ++r) {
    const int64_t *v = all.data() + r * mine.size();
    JsonValue rank = JsonValue::object();
    rank.set("rank", JsonValue::integer(r));
    JsonValue coords = JsonValue::object();
    const std::vector<int64_t> c = comm.coordsOf(r);
    for (size_t a = 0; a < comm.mesh().size(); ++a)
      coords.set(comm.mesh()[a].name, JsonValue::integer(c[a]));
    rank.set("coords", coords);
    rank.set("peak_bytes", JsonValue::integer(v[kPeak]));
    rank.set("predicted_peak_bytes", JsonValue::integer(v[kPredictedPeak]));
    // Mixed precision: the part of peak_bytes that is the fp32 staging of
    // bf16 operands (the planned arena does not include it).
    rank.set("bf16_staging_bytes", JsonValue::integer(v[kBF16Staging]));
    // Buffer memory the kernels keep for themselves (cuBLASLt's workspace,
    // the CUDA bf16 kernels' buffers): beside peak_bytes, so that the two
    // add up to what the tensors and the kernels held on the device.
    rank.set("kernel_workspace_bytes",
             JsonValue::integer(v[kKernelWorkspace]));
    rank.set("rss_peak_bytes", JsonValue::integer(v[kRssPeak]));
    rank.set("model_state_bytes", JsonValue::integer(v[kModelState]));
    if (v[kHasPredictions])
      rank.set("predicted_model_state_bytes",
               JsonValue::integer(v[kPredictedModelState]));
    rank.set("sent_bytes_per_step", perKind(v + kSent));
    if (v[kHasPredictions])
      rank.set("predicted_sent_bytes_per_step", perKind(v + kPredictedSent));
    rank.set("comm_ms_per_step", JsonValue::number(v[kCommNs] * 1e-6));
    if (v[kPredictedIdlePpm] >= 0 && v[kPipelineNs] > 0) {
      // The measured bubble, next to the simulated one: the share of the
      // pipeline's span (the slowest stage's phase) the stage was not
      // computing or sending, i.e. blocked in receives or done early;
      // and the part of its own phase it spent blocked in receives.
      const double busyNs = double(v[kPipelineNs] - v[kPipelineWaitNs]);
      const double idle = 1.0 - busyNs / double(pipelineSpanNs);
      const double wait = double(v[kPipelineWaitNs]) / double(v[kPipelineNs]);
      rank.set("pipeline_idle_fraction", JsonValue::number(idle));
      rank.set("pipeline_wait_fraction", JsonValue::number(wait));
      rank.set("predicted_pipeline_idle_fraction",
               JsonValue::number(v[kPredictedIdlePpm] * 1e-6));
      // Activations in flight: the stash follows the schedule's actions,
      // so it equals the simulated figure.
      rank.set("pipeline_stash_peak_bytes", JsonValue::integer(v[kStashPeak]));
      if (v[kPredictedStashPeak] >= 0)
        rank.set("predicted_pipeline_stash_peak_bytes",
                 JsonValue::integer(v[kPredictedStashPeak]));
      if (!opts.quiet) {
        int64_t stageOfRank = 0;
        for (size_t a = 0; a < comm.mesh().size(); ++a)
          if (comm.mesh()[a].name == "pp")
            stageOfRank = comm.coordsOf(r)[a];
        std::printf("pipeline stage %" PRId64 " (rank %d): idle %.1f%% of the "
                    "pipeline's %.2f ms per step (busy %.2f ms, blocked in "
                    "receives %.1f%% of its own phase), predicted bubble "
                    "%.1f%%\n",
                    stageOfRank, r, 100.0 * idle,
                    pipelineSpanNs * 1e-6 / double(steps),
                    busyNs * 1e-6 / double(steps), 100.0 * wait,
                    v[kPredictedIdlePpm] * 1e-4);
        if (v[kStashPeak] > 0 || v[kPredictedStashPeak] > 0)
          std::printf("pipeline stage %" PRId64 " (rank %d): activations in "
                      "flight peak %" PRId64 " bytes (predicted %" PRId64 ")\n",
                      stageOfRank, r, v[kStashPeak], v[kPredictedStashPeak]);
      }
    }
    rankEntries.push_back(rank);
  }
  JsonValue summary = JsonValue::object();
  summary.set("summary", JsonValue::boolean(true));
  summary.set("ranks", JsonValue::array(rankEntries));
  summary.set("steps", JsonValue::integer(stepsRun));
  const int stopSignal =
      stopCode >= kStopForSignal ? stopCode - kStopForSignal : 0;
  const std::string stoppedBy = stopSignal ? stopSignalName(stopSignal)
                                : stopCode == kStopForTimeLimit ? "time limit"
                                                                : "";
  if (stopCode)
    summary.set("stopped_by", JsonValue::string(stoppedBy));
  summary.set("mean_loss", JsonValue::number(meanLoss));
  // Throughput over the steps after the first (the first alone when the
  // run has one).
  const int64_t timedSteps = stepsRun > 1 ? stepsRun - 1 : stepsRun;
  const double timedSpan = stepsRun > 1 ? timedSec : firstSec;
  const double meanTokPerSec =
      timedSpan > 0 ? static_cast<double>(timedSteps * B * T) / timedSpan : 0;
  const double meanMfu =
      training ? modelFlopsUtilization(flopsPerToken, meanTokPerSec,
                                       opts.peakTflops, comm.size())
               : 0.0;
  if (timedSteps > 0) {
    summary.set("tokens_per_s", JsonValue::number(meanTokPerSec));
    if (meanMfu > 0)
      summary.set("mfu", JsonValue::number(meanMfu));
  }
  if (valData && stepsRun > 0 && !std::isnan(lastValLoss))
    summary.set("val_loss", JsonValue::number(lastValLoss));
  // What the kernels chose on this rank (the CUDA backend's attention
  // launch shapes, timed on the device): a run's speed depends on it.
  const std::vector<std::string> choices = ex->kernelChoices();
  if (!choices.empty()) {
    JsonValue list = JsonValue::array();
    for (const std::string &c : choices)
      list.push(JsonValue::string(c));
    summary.set("kernel_choices", list);
  }
  LOOM_RETURN_IF_ERROR(log.write(summary));
  LOOM_RETURN_IF_ERROR(log.close());
  if (!opts.saveCheckpoint.empty())
    LOOM_RETURN_IF_ERROR(
        saveCheckpoint(*ex, checkpointPathAt(opts.saveCheckpoint, lastStep),
                       lastStep, runMetadata));
  if (!opts.trace.empty())
    LOOM_RETURN_IF_ERROR(
        trace.write(multi ? rankPath(opts.trace, comm.rank()) : opts.trace));
  LOOM_RETURN_IF_ERROR(comm.barrier());
  if (!opts.quiet)
    std::printf(
        "done: %" PRId64 " steps, mean loss %.9g, %s, peak tensor memory "
        "%s (planned arena %s%s)%s, peak RSS %s\n",
        stepsRun, meanLoss,
        throughputText(stepsRun, meanTokPerSec, meanMfu).c_str(),
        formatBytes(ex->peakTensorBytes()).c_str(),
        formatBytes(stage.arena_bytes()).c_str(),
        ex->bf16StagingBytes() > 0
            ? (", bf16 staging " + formatBytes(ex->bf16StagingBytes())).c_str()
            : "",
        ex->kernelWorkspaceBytes() > 0
            ? (" + kernel workspace " + formatBytes(ex->kernelWorkspaceBytes()))
                  .c_str()
            : "",
        formatBytes(rssPeakBytes()).c_str());
  if (!opts.quiet)
    for (const std::string &c : choices)
      std::printf("kernels: %s\n", c.c_str());
  if (stopCode && lead) {
    // On stderr, --quiet or not: a script must see why the run is short.
    const int64_t planned = startStep + opts.steps;
    std::string saved = "nothing saved (no --save-checkpoint)";
    if (!opts.saveCheckpoint.empty()) {
      const std::string path = checkpointPathAt(opts.saveCheckpoint, lastStep);
      saved = "saved " + path;
      if (training)
        saved += "; resume with --load-checkpoint " + path + " --steps " +
                 std::to_string(planned - lastStep) + " for the rest";
    }
    char limit[64];
    std::snprintf(limit, sizeof(limit), "the --time-limit of %g minutes",
                  opts.timeLimitMinutes);
    std::fprintf(stderr,
                 "loom-run: stopped by %s after step %" PRId64 " of %" PRId64
                 ": %s\n",
                 stopSignal ? stoppedBy.c_str() : limit, lastStep, planned,
                 saved.c_str());
  }
  if (outcome) {
    outcome->stepsRun = stepsRun;
    outcome->stopSignal = stopSignal;
    outcome->timeLimit = stopCode == kStopForTimeLimit;
  }
  return Status::success();
}

} // namespace loom
