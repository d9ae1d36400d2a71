//===- run_options.h - loom-run's command line ------------------*- C++ -*-===//
//
// What a run of a compiled program is asked to do, parsed from loom-run's
// command line. The driver (training_run.h) and every binary that drives a
// run (loom-run, the device-memory check in test/runtime) share the flags,
// so a test runs the exact command a user runs.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_RUN_OPTIONS_H
#define LOOM_RUNTIME_CORE_RUN_OPTIONS_H

#include "runtime/core/lr_schedule.h"
#include "runtime/core/sampler.h"
#include "runtime/core/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

/// loom-run's usage text (printed with --help and after a usage error).
extern const char *const kLoomRunUsage;

/// One run's flags (see kLoomRunUsage).
struct RunOptions {
  std::string program, data, loadCheckpoint, saveCheckpoint, logJson, trace;
  int64_t steps = -1;
  int64_t sample = -1; // --sample N; -1: not sampling
  std::string prompt;
  bool hasPrompt = false;
  /// --prompt-tokens ID,ID,...: the prompt as token ids (never empty when
  /// given: the parser rejects an empty list).
  std::vector<int32_t> promptTokens;
  /// --context-programs F,F,...: the model's evaluation programs at shorter
  /// seqs, run while the context fits them (sampling_contexts.h).
  std::vector<std::string> contextPrograms;
  /// --tokenizer F: an llm.c tokenizer file (bpe_tokenizer.h) that encodes
  /// --prompt and decodes the sampled ids; without one, tokens are bytes.
  std::string tokenizer;
  /// --temperature T (0: greedy) and --top-k K (0: all) of --sample.
  double temperature = 0.0;
  int64_t topK = 0;
  /// How --sample chooses tokens: --temperature, --top-k, --seed.
  SamplingConfig sampling() const {
    SamplingConfig c;
    c.temperature = temperature;
    c.topK = topK;
    c.seed = seed;
    return c;
  }
  bool trainingFlags = false; // any of --lr ... --schedule-steps
  double lr = 1e-3, minLr = 0.0;
  int64_t warmup = 0;
  LrSchedule::Kind schedule = LrSchedule::Kind::Cosine;
  double decayFraction = 0.2; // --decay-fraction (wsd)
  int64_t scheduleSteps = -1; // -1: start step + steps
  uint64_t seed = 1337;
  uint32_t stage = 0;
  bool quiet = false;
  std::string backend = "cpu";
  /// --peak-tflops F: one device's peak (TFLOP/s) that a training step's
  /// model FLOPs utilization is reported against (model_flops.h); 0:
  /// the device's known bf16 peak (--backend cuda on an H100 / H200 /
  /// A100), else none reported.
  double peakTflops = 0;
  /// The device's memory bandwidth (GB/s), which the backend knows (no
  /// flag); with peakTflops, the roofline a --trace records (trace.h).
  double peakGbps = 0;
  /// Validation during training (--val-data F): the mean loss over
  /// --eval-steps batches of F (default: the file's batches, at most 100)
  /// after every --eval-every steps (default: only after the last).
  std::string valData;
  int64_t evalEvery = -1;
  int64_t evalSteps = -1;
  /// --save-every N: the checkpoint also after every N steps.
  int64_t saveEvery = -1;
  /// --time-limit M: stop after the first step that ends M minutes or more
  /// after the run started (saving --save-checkpoint); < 0: no limit.
  double timeLimitMinutes = -1;
  /// --shuffle: training reads the file's sequences in a new order each
  /// epoch, seeded by --seed (TokenDataConfig::shuffle).
  bool shuffle = false;
};

/// The --save-checkpoint path of a save after `step` completed steps: each
/// "{step}" in `path` replaced by the number (one file per save), else
/// `path` itself (overwritten, atomically, each time).
std::string checkpointPathAt(const std::string &path, int64_t step);

/// Parses argv (argv[0] is the program name). `help` is set for --help /
/// -h (then nothing else is checked). Errors name the flag and the fix; the
/// caller prints kLoomRunUsage after them.
Status parseRunOptions(int argc, char **argv, RunOptions &opts, bool &help);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_RUN_OPTIONS_H
