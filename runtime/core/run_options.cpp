//===- run_options.cpp - loom-run's command line ----------------*- C++ -*-===//
#include "runtime/core/run_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace loom {

const char *const kLoomRunUsage =
    "usage: loom-run PROGRAM --data F --steps N [options]\n"
    "       loom-run PROGRAM --sample N --prompt TEXT [--load-checkpoint F]\n"
    "                [--tokenizer F] [--temperature T [--top-k K]]\n"
    "\n"
    "Runs a compiled Loom program on an llm.c token file: evaluates the loss,\n"
    "or trains when the program has an optimizer update.\n"
    "\n"
    "  PROGRAM                 program file written by loom-translate\n"
    "  --data F                llm.c token file (.bin, uint16 tokens), or a\n"
    "                          quoted glob pattern of shards read in sorted\n"
    "                          order ('data/train_*.bin')\n"
    "  --steps N               number of batches (evaluation: N >= 1;\n"
    "                          training: N >= 0, 0 only initializes)\n"
    "  --seed S                parameter init seed (default 1337)\n"
    "  --stage K               pipeline stage to run (default 0)\n"
    "  --load-checkpoint F     load parameters from a safetensors file\n"
    "  --save-checkpoint F     save parameters after the last step (a\n"
    "                          \"{step}\" in F becomes the step count)\n"
    "  --log-json F            one JSON object per step, then a summary\n"
    "  --trace F.json          Chrome / Perfetto trace of every instruction\n"
    "  --backend cpu|cuda      where the kernels run (default cpu); cuda\n"
    "                          needs a build with the CUDA backend and a GPU\n"
    "  --quiet                 no progress output\n"
    "Training programs:\n"
    "  --peak-tflops F         report each step's model FLOPs utilization\n"
    "                          (MFU: 6N + 6LCT FLOPs per token) against F\n"
    "                          TFLOP/s per device (default with --backend\n"
    "                          cuda: the GPU's bf16 peak when known, e.g.\n"
    "                          989 on an H100 SXM or H200)\n"
    "  --lr F                  peak learning rate (default 1e-3)\n"
    "  --min-lr F              where the decay ends (default 0)\n"
    "  --warmup W              linear warmup steps (default 0)\n"
    "  --lr-schedule K         constant | cosine | linear | wsd (default\n"
    "                          cosine; wsd: warmup-stable-decay)\n"
    "  --decay-fraction F      wsd: the share of the steps after warmup\n"
    "                          that decays to --min-lr (default 0.2)\n"
    "  --schedule-steps N      steps the schedule spans (default: the start\n"
    "                          step + --steps)\n"
    "  --shuffle               read the --data file's sequences in a new\n"
    "                          order each epoch (seeded by --seed; every\n"
    "                          sequence once per epoch) instead of in order\n"
    "  --save-every N          also save --save-checkpoint after every N\n"
    "                          steps (\"{step}\" in its path: one file per\n"
    "                          save; else the file is replaced atomically)\n"
    "  --time-limit M          stop after the first step that ends M\n"
    "                          minutes after the run started, saving\n"
    "                          --save-checkpoint (exit status 0)\n"
    "  --val-data F            validation: the mean loss of the weights on\n"
    "                          --eval-steps batches of F (the training\n"
    "                          program's forward), after the last step and\n"
    "  --eval-every N          after every N steps (default: the last only)\n"
    "  --eval-steps K          batches per validation (default: F's batches\n"
    "                          for this batch and seq, at most 100)\n"
    "Sampling (evaluation programs; no --data / --steps):\n"
    "  --sample N              generate N tokens after the prompt (greedy\n"
    "                          unless --temperature) and print the text\n"
    "  --prompt TEXT           the text to continue: its bytes are the\n"
    "                          tokens, or --tokenizer encodes it\n"
    "  --prompt-tokens IDS     the prompt as comma-separated token ids\n"
    "  --tokenizer F           llm.c tokenizer file (gpt2_tokenizer.bin):\n"
    "                          GPT-2 BPE-encodes --prompt (as tiktoken) and\n"
    "                          decodes the text; without a prompt, sampling\n"
    "                          starts from its end-of-text token\n"
    "  --temperature T         draw from softmax(logits / T) instead of\n"
    "                          the argmax (default 0: greedy); --seed S\n"
    "                          seeds the draws\n"
    "  --top-k K               with --temperature: draw among the K most\n"
    "                          likely tokens only (default 0: all)\n"
    "  --log-json F            the prompt's and the sampled token ids, each\n"
    "                          sampled token's log-probability and the\n"
    "                          text, as one JSON object\n"
    "  --context-programs F,F  the same model compiled at shorter --seq:\n"
    "                          each token runs the shortest that holds the\n"
    "                          context (loom sample passes them)\n"
    "  --help                  show this message\n"
    "Environment, --backend cpu:\n"
    "  LOOM_CPU_GEMM           invariant (default: each element of a GEMM\n"
    "                          summed in one order, whatever the batch,\n"
    "                          threads or CPU, so partitioned runs match\n"
    "                          bit for bit) or openblas (OpenBLAS's sgemm)\n"
    "  OMP_WAIT_POLICY         PASSIVE lets idle OpenMP threads sleep; unset,\n"
    "                          libgomp spins them after every parallel\n"
    "                          region, which takes the cores from the\n"
    "                          working threads on a busy machine (about 3x\n"
    "                          slower there, the same alone). `loom train`,\n"
    "                          `eval` and `sample` set PASSIVE unless it or\n"
    "                          GOMP_SPINCOUNT is set\n"
    "Environment, --backend cuda (a bad value is an error naming the\n"
    "choices):\n"
    "  LOOM_CUDA_FLASH_SHAPE   launch shapes of the tensor-core attention:\n"
    "                          auto (default: each kernel in its fastest,\n"
    "                          timed on the device at a geometry's first\n"
    "                          run and printed at the end), or spill0,\n"
    "                          blocks, wide or tall for every kernel\n"
    "  LOOM_CUDA_ATTENTION     flash (default) or naive\n"
    "  LOOM_CUDA_GROUP_ADAMW, LOOM_CUDA_GELU_EPILOGUE,\n"
    "  LOOM_CUDA_RESIDUAL_NORM, LOOM_CUDA_FUSED_CROSS_ENTROPY\n"
    "                          0 runs an update's AdamWs, GEMM + GELU,\n"
    "                          Add + LayerNorm and loss + gradient as their\n"
    "                          instructions one by one (default 1: one call)\n"
    "  LOOM_CUDA_BIAS_GRAD_EPILOGUE\n"
    "                          0 sums a bias gradient in its own kernel\n"
    "                          (default 1: in the weight gradient's GEMM)\n"
    "  LOOM_WORLD_SIZE, LOOM_RANK, LOOM_NCCL_ID_FILE\n"
    "                          several ranks over NCCL without mpirun: one\n"
    "                          process per rank, the ncclUniqueId passed\n"
    "                          through the file (LOOM_NCCL_ID_TIMEOUT\n"
    "                          seconds to wait for it, default 120;\n"
    "                          LOOM_LOCAL_RANK / LOOM_LOCAL_WORLD_SIZE for\n"
    "                          several nodes)\n"
    "  LOOM_NCCL_TIMEOUT       seconds a collective may take before its rank\n"
    "                          ends (default 600; 0: no limit)\n"
    "  LOOM_CUBLASLT_LIBRARY, LOOM_NCCL_LIBRARY\n"
    "                          the library file to load instead of looking\n"
    "                          for it on LD_LIBRARY_PATH and where the build\n"
    "                          found it\n";

namespace {

Status parseUnsigned(const std::string &flag, const std::string &text,
                     uint64_t max, uint64_t &out) {
  errno = 0;
  char *end = nullptr;
  const bool digits = !text.empty() &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  unsigned long long v = digits ? std::strtoull(text.c_str(), &end, 10) : 0;
  LOOM_CHECK(digits && errno == 0 && v <= max,
             flag << " expects a non-negative integer"
                  << (max < UINT64_MAX ? " <= " + std::to_string(max) : "")
                  << ", got '" << text << "'");
  out = v;
  return Status::success();
}

Status parseNonNegative(const std::string &flag, const std::string &text,
                        double &out) {
  errno = 0;
  char *end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  LOOM_CHECK(!text.empty() && end && *end == '\0' && errno == 0 &&
                 std::isfinite(v) && v >= 0.0,
             flag << " expects a non-negative number, got '" << text << "'");
  out = v;
  return Status::success();
}

/// "ID,ID,...": non-negative token ids (checked against the vocabulary when
/// the model is known).
Status parseTokenList(const std::string &flag, const std::string &text,
                      std::vector<int32_t> &ids) {
  ids.clear();
  size_t from = 0;
  while (true) {
    const size_t comma = text.find(',', from);
    const std::string item = text.substr(
        from, comma == std::string::npos ? std::string::npos : comma - from);
    uint64_t id = 0;
    LOOM_RETURN_IF_ERROR(
        parseUnsigned(flag, item, INT32_MAX, id)
            .withContext(flag + " item " + std::to_string(ids.size() + 1) +
                         " (token ids separated by commas, e.g. 50256,464)"));
    ids.push_back(static_cast<int32_t>(id));
    if (comma == std::string::npos)
      return Status::success();
    from = comma + 1;
  }
}

} // namespace

Status parseRunOptions(int argc, char **argv, RunOptions &opts, bool &help) {
  help = false;
  bool hasDecayFraction = false;
  bool hasSamplingFlag = false; // --temperature or --top-k
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help = true;
      return Status::success();
    }
    if (arg == "--quiet") {
      opts.quiet = true;
      continue;
    }
    if (arg == "--shuffle") {
      opts.shuffle = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      if (arg == "--")
        continue;
      LOOM_CHECK(arg.empty() || arg[0] != '-' || arg == "-",
                 "unknown flag '" << arg << "'");
      positional.push_back(arg);
      continue;
    }
    std::string flag = arg, value;
    bool hasValue = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      hasValue = true;
    }
    static const char *kValued[] = {"--data",
                                    "--steps",
                                    "--seed",
                                    "--stage",
                                    "--log-json",
                                    "--trace",
                                    "--load-checkpoint",
                                    "--save-checkpoint",
                                    "--lr",
                                    "--min-lr",
                                    "--warmup",
                                    "--lr-schedule",
                                    "--decay-fraction",
                                    "--schedule-steps",
                                    "--sample",
                                    "--prompt",
                                    "--prompt-tokens",
                                    "--context-programs",
                                    "--tokenizer",
                                    "--temperature",
                                    "--top-k",
                                    "--backend",
                                    "--save-every",
                                    "--time-limit",
                                    "--val-data",
                                    "--eval-every",
                                    "--eval-steps",
                                    "--peak-tflops"};
    bool known = false;
    for (const char *k : kValued)
      known |= flag == k;
    LOOM_CHECK(known, "unknown flag '" << flag << "'");
    if (!hasValue) {
      LOOM_CHECK(i + 1 < argc, flag << " needs a value");
      value = argv[++i];
    }
    // An empty prompt reaches the sampler, which says how to fix it.
    LOOM_CHECK(!value.empty() || flag == "--prompt",
               flag << " needs a non-empty value");
    uint64_t n = 0;
    if (flag == "--lr" || flag == "--min-lr" || flag == "--warmup" ||
        flag == "--lr-schedule" || flag == "--schedule-steps" ||
        flag == "--decay-fraction")
      opts.trainingFlags = true;
    if (flag == "--backend") {
      LOOM_CHECK(value == "cpu" || value == "cuda",
                 "--backend is cpu or cuda, got '" << value << "'");
      opts.backend = value;
    } else if (flag == "--prompt") {
      opts.prompt = value;
      opts.hasPrompt = true;
    } else if (flag == "--prompt-tokens") {
      LOOM_RETURN_IF_ERROR(parseTokenList(flag, value, opts.promptTokens));
    } else if (flag == "--context-programs") {
      opts.contextPrograms.clear();
      for (size_t from = 0;;) {
        const size_t comma = value.find(',', from);
        opts.contextPrograms.push_back(
            value.substr(from, comma == std::string::npos ? std::string::npos
                                                          : comma - from));
        LOOM_CHECK(!opts.contextPrograms.back().empty(),
                   "--context-programs item "
                       << opts.contextPrograms.size()
                       << " is empty (program files separated by commas)");
        if (comma == std::string::npos)
          break;
        from = comma + 1;
      }
    } else if (flag == "--tokenizer") {
      opts.tokenizer = value;
    } else if (flag == "--temperature") {
      LOOM_RETURN_IF_ERROR(parseNonNegative(flag, value, opts.temperature));
      hasSamplingFlag = true;
    } else if (flag == "--top-k") {
      LOOM_RETURN_IF_ERROR(parseUnsigned(flag, value, INT32_MAX, n));
      opts.topK = static_cast<int64_t>(n);
      hasSamplingFlag = true;
    } else if (flag == "--sample") {
      LOOM_RETURN_IF_ERROR(parseUnsigned(flag, value, INT32_MAX, n));
      opts.sample = static_cast<int64_t>(n);
    } else if (flag == "--data")
      opts.data = value;
    else if (flag == "--log-json")
      opts.logJson = value;
    else if (flag == "--trace")
      opts.trace = value;
    else if (flag == "--load-checkpoint")
      opts.loadCheckpoint = value;
    else if (flag == "--save-checkpoint")
      opts.saveCheckpoint = value;
    else if (flag == "--steps") {
      LOOM_RETURN_IF_ERROR(parseUnsigned(flag, value, INT32_MAX, n));
      opts.steps = static_cast<int64_t>(n);
    } else if (flag == "--seed") {
      LOOM_RETURN_IF_ERROR(parseUnsigned(flag, value, UINT64_MAX, n));
      opts.seed = n;
    } else if (flag == "--lr") {
      LOOM_RETURN_IF_ERROR(parseNonNegative(flag, value, opts.lr));
    } else if (flag == "--min-lr") {
      LOOM_RETURN_IF_ERROR(parseNonNegative(flag, value, opts.minLr));
    } else if (flag == "--warmup") {
      LOOM_RETURN_IF_ERROR(parseUnsigned(flag, value, INT32_MAX, n));
      opts.warmup = static_cast<int64_t>(n);
    } else if (flag == "--schedule-steps") {
      LOOM_RETURN_IF_ERROR(parseUnsigned(flag, value, INT32_MAX, n));
      opts.scheduleSteps = static_cast<int64_t>(n);
    } else if (flag == "--lr-schedule") {
      LOOM_CHECK(LrSchedule::parse(value, opts.schedule),
                 "--lr-schedule expects constant, cosine, linear or wsd, got '"
                     << value << "'");
    } else if (flag == "--decay-fraction") {
      LOOM_RETURN_IF_ERROR(parseNonNegative(flag, value, opts.decayFraction));
      LOOM_CHECK(opts.decayFraction > 0 && opts.decayFraction <= 1,
                 "--decay-fraction expects a share in (0, 1], got '" << value
                                                                     << "'");
      hasDecayFraction = true;
    } else if (flag == "--peak-tflops") {
      LOOM_RETURN_IF_ERROR(parseNonNegative(flag, value, opts.peakTflops));
      LOOM_CHECK(opts.peakTflops > 0,
                 "--peak-tflops expects a device's peak in TFLOP/s > 0, got '"
                     << value << "'");
    } else if (flag == "--time-limit") {
      LOOM_RETURN_IF_ERROR(
          parseNonNegative(flag, value, opts.timeLimitMinutes));
      LOOM_CHECK(opts.timeLimitMinutes > 0,
                 "--time-limit expects minutes > 0, got '" << value << "'");
    } else if (flag == "--val-data") {
      opts.valData = value;
    } else if (flag == "--save-every" || flag == "--eval-every" ||
               flag == "--eval-steps") {
      LOOM_RETURN_IF_ERROR(parseUnsigned(flag, value, INT32_MAX, n));
      LOOM_CHECK(n >= 1,
                 flag << " expects a step count >= 1, got '" << value << "'");
      (flag == "--save-every"   ? opts.saveEvery
       : flag == "--eval-every" ? opts.evalEvery
                                : opts.evalSteps) = static_cast<int64_t>(n);
    } else if (flag == "--stage") {
      LOOM_RETURN_IF_ERROR(parseUnsigned(flag, value, UINT32_MAX, n));
      opts.stage = static_cast<uint32_t>(n);
    }
  }
  LOOM_CHECK(!positional.empty(), "missing PROGRAM (the program file)");
  LOOM_CHECK(positional.size() == 1, "expected one PROGRAM, got "
                                         << positional.size()
                                         << " positional arguments");
  opts.program = positional[0];
  const bool hasPromptTokens = !opts.promptTokens.empty();
  const char *samplingInput = opts.hasPrompt            ? "--prompt"
                              : hasPromptTokens         ? "--prompt-tokens"
                              : !opts.tokenizer.empty() ? "--tokenizer"
                              : !opts.contextPrograms.empty()
                                  ? "--context-programs"
                                  : nullptr;
  if (opts.sample >= 0 || samplingInput) {
    LOOM_CHECK(opts.sample >= 0, samplingInput << " needs --sample N (the "
                                                  "number of tokens to "
                                                  "generate)");
    LOOM_CHECK(opts.hasPrompt || hasPromptTokens || !opts.tokenizer.empty(),
               "--sample needs --prompt TEXT (the text to continue), "
               "--prompt-tokens IDS, or --tokenizer F (then it starts from "
               "the tokenizer's end-of-text token)");
    LOOM_CHECK(!(opts.hasPrompt && hasPromptTokens),
               "--prompt and --prompt-tokens both give the prompt; pass one");
    const char *extra = !opts.data.empty()             ? "--data"
                        : opts.steps >= 0              ? "--steps"
                        : !opts.saveCheckpoint.empty() ? "--save-checkpoint"
                        : !opts.trace.empty()          ? "--trace"
                        : opts.trainingFlags         ? "the learning-rate flags"
                        : opts.saveEvery >= 0        ? "--save-every"
                        : opts.timeLimitMinutes >= 0 ? "--time-limit"
                        : !opts.valData.empty()      ? "--val-data"
                        : opts.shuffle               ? "--shuffle"
                                                     : nullptr;
    LOOM_CHECK(!extra, "--sample runs no steps; drop "
                           << extra << " (or run the steps without --sample)");
    return checkSamplingConfig(opts.sampling());
  }
  LOOM_CHECK(!hasSamplingFlag, "--temperature and --top-k choose how --sample "
                               "draws tokens; add --sample N --prompt TEXT or "
                               "drop them");
  LOOM_CHECK(!hasDecayFraction || opts.schedule == LrSchedule::Kind::WSD,
             "--decay-fraction shapes --lr-schedule wsd (the schedule is "
                 << LrSchedule::name(opts.schedule)
                 << "); add --lr-schedule wsd or drop it");
  LOOM_CHECK(!opts.data.empty(), "missing --data (the token file)");
  LOOM_CHECK(opts.steps >= 0, "missing --steps (number of batches)");
  LOOM_CHECK(opts.saveEvery < 0 || !opts.saveCheckpoint.empty(),
             "--save-every needs --save-checkpoint F (where to save)");
  LOOM_CHECK((opts.evalEvery < 0 && opts.evalSteps < 0) ||
                 !opts.valData.empty(),
             (opts.evalEvery >= 0 ? "--eval-every" : "--eval-steps")
                 << " needs --val-data F (the validation token file)");
  return Status::success();
}

std::string checkpointPathAt(const std::string &path, int64_t step) {
  static const std::string kStep = "{step}";
  std::string out;
  size_t from = 0;
  for (size_t at; (at = path.find(kStep, from)) != std::string::npos;
       from = at + kStep.size())
    out += path.substr(from, at - from) + std::to_string(step);
  return out + path.substr(from);
}

} // namespace loom
