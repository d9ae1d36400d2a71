//===- Plan.cpp - `loom plan`: search parallel plans ------------*- C++ -*-===//
//
// 1. Parse the flags; 2. import the config with the GPT importer and read Φ
// the way --loom-summary does; 3. enumerate every valid plan and predict it
// (PlanSearch.h, PlanModel.h); 4. print the report or the JSON
// (PlanReport.h), or say why no plan is valid or fits.
//
//===----------------------------------------------------------------------===//

#include "tools/loom/Plan.h"

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/Models/GPTModel.h"
#include "passes/Analysis/ModelSummary.h"
#include "tools/loom/PlanModel.h"
#include "tools/loom/PlanReport.h"
#include "tools/loom/PlanSearch.h"
#include "tools/loom/StrategyFlags.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <set>

using namespace loom::plan;

const char *const loom::cli::kPlanUsage = R"(usage:
  loom plan --config CFG.json --gpus G --gpu-mem-gb M --batch B [--seq T]
            [--gpus-per-node K] [--intra-node-gbps BW] [--inter-node-gbps BW]
            [--peak-tflops F] [--precision bf16|fp32] [--grad-precision bf16|fp32]
            [--top N] [--json]
            [--no-sequence-parallel] [--vocab-divisible-by D] [restrictions]

  Searches dp x tp x pp = G (tp <= K and dividing n_head, pp <= n_layer, dp
  dividing B), ZeRO 0-3, micro-batches, pipeline schedule gpipe|1f1b|
  interleaved (+ virtual stages) and recomputation none|selective|full
  (selective: the MLP's GELU recomputed in the backward) with
  an analytic cost model; prints the fastest plans that fit in M GB
  (10^9 bytes) per GPU, why each rejected family does not fit, and the
  chosen plan's memory, time and rank placement (--json: the best plan).

  --batch is the global batch in rows, --seq defaults to n_positions.
  --gpus-per-node 8; --intra-node-gbps 450 (NVLink, per GPU and direction);
  --inter-node-gbps 50 (4 x 100 Gb/s InfiniBand); --peak-tflops 989 (H100
  dense bf16; 67 with --precision fp32); --top 10. Tensor parallelism comes
  with sequence parallelism unless --no-sequence-parallel. A vocabulary tp
  does not divide is padded to a multiple of D x tp rows, as `loom compile`
  does (--vocab-divisible-by 128). --grad-precision fp32 plans bf16 mixed
  precision with fp32 gradients, as `loom compile` does: 18 bytes of model
  state per parameter (2+16/N under ZeRO-2), 4-byte gradient collectives.
restrictions (search only plans with these values):
  --mesh dp=D,tp=T,pp=P (any subset)  --zero Z  --microbatches M
  --schedule gpipe|1f1b|interleaved  --virtual-stages V
  --recompute none|selective|full
)";

namespace {

int fail(const std::string &message) {
  llvm::errs() << "loom plan: error: " << message << "\n";
  return 1;
}

//===----------------------------------------------------------------------===//
// 1. Flags
//===----------------------------------------------------------------------===//

std::optional<PlanOptions> parseFlags(const std::vector<std::string> &args) {
  const std::set<std::string> valueFlags{
      "--config",      "--gpus", "--gpus-per-node",     "--gpu-mem-gb",
      "--batch",       "--seq",  "--intra-node-gbps",   "--inter-node-gbps",
      "--peak-tflops", "--top",  "--vocab-divisible-by"};
  const std::set<std::string> restrictionFlags{
      "--mesh",           "--zero",      "--microbatches", "--schedule",
      "--virtual-stages", "--recompute", "--precision", "--grad-precision"};
  std::map<std::string, std::string> values;
  PlanOptions opts;
  ::loom::cli::Strategy strategy;
  std::set<std::string> meshAxes;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inlineValue = false;
    if (size_t eq = flag.find('=');
        eq != std::string::npos && flag.rfind("--", 0) == 0) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inlineValue = true;
    }
    if (flag == "--json" || flag == "--no-sequence-parallel") {
      if (inlineValue) {
        fail(flag + " takes no value");
        return std::nullopt;
      }
      if (flag == "--json")
        opts.json = true;
      else
        opts.work.sequenceParallel = false;
      continue;
    }
    if (!valueFlags.count(flag) && !restrictionFlags.count(flag)) {
      fail("unknown argument '" + args[i] + "'\n" + ::loom::cli::kPlanUsage);
      return std::nullopt;
    }
    if (!inlineValue) {
      if (i + 1 >= args.size()) {
        fail(flag + " needs a value");
        return std::nullopt;
      }
      value = args[++i];
    }
    if (restrictionFlags.count(flag)) {
      std::string error;
      ::loom::cli::parseStrategyFlag(flag, value, strategy, error);
      if (!error.empty()) {
        fail(error);
        return std::nullopt;
      }
      if (flag == "--mesh") {
        llvm::SmallVector<llvm::StringRef> parts;
        llvm::StringRef(value).split(parts, ',', -1, /*KeepEmpty=*/false);
        for (llvm::StringRef part : parts)
          meshAxes.insert(part.split('=').first.trim().str());
      }
    }
    values[flag] = value;
  }

  // Integers >= 1 and positive numbers.
  auto positiveInt =
      [&](const char *flag,
          std::optional<int64_t> fallback) -> std::optional<int64_t> {
    auto it = values.find(flag);
    if (it == values.end()) {
      if (!fallback)
        fail(std::string(flag) + " is required\n" + ::loom::cli::kPlanUsage);
      return fallback;
    }
    int64_t v;
    if (llvm::StringRef(it->second).getAsInteger(10, v) || v < 1) {
      fail(std::string(flag) + " needs a positive integer, got '" + it->second +
           "'");
      return std::nullopt;
    }
    return v;
  };
  auto positiveNumber =
      [&](const char *flag,
          std::optional<double> fallback) -> std::optional<double> {
    auto it = values.find(flag);
    if (it == values.end()) {
      if (!fallback)
        fail(std::string(flag) + " is required\n" + ::loom::cli::kPlanUsage);
      return fallback;
    }
    double v;
    if (llvm::StringRef(it->second).getAsDouble(v) || !std::isfinite(v) ||
        v <= 0) {
      fail(std::string(flag) + " needs a positive number, got '" + it->second +
           "'");
      return std::nullopt;
    }
    return v;
  };

  if (!values.count("--config")) {
    fail(std::string("--config CFG.json is required\n") +
         ::loom::cli::kPlanUsage);
    return std::nullopt;
  }
  opts.config = values["--config"];
  auto gpus = positiveInt("--gpus", std::nullopt);
  if (!gpus)
    return std::nullopt;
  auto perNode = positiveInt("--gpus-per-node", 8);
  auto memory = positiveNumber("--gpu-mem-gb", std::nullopt);
  if (!perNode || !memory)
    return std::nullopt;
  auto batch = positiveInt("--batch", std::nullopt);
  if (!batch)
    return std::nullopt;
  // --seq: 0 means the config's n_positions (resolved at import).
  auto seq = positiveInt("--seq", 0);
  auto top = positiveInt("--top", 10);
  auto vocabDivisibleBy = positiveInt("--vocab-divisible-by", 128);
  if (!vocabDivisibleBy)
    return std::nullopt;
  opts.work.vocabDivisibleBy = *vocabDivisibleBy;
  opts.cluster.precision =
      strategy.precision == "fp32" && values.count("--precision")
          ? Precision::FP32
          : Precision::BF16;
  if (strategy.gradPrecision == "bf16" &&
      opts.cluster.precision == Precision::FP32) {
    fail("--grad-precision bf16 rounds the gradients of bf16 mixed "
         "precision; it needs --precision bf16 (fp32 training keeps fp32 "
         "gradients)");
    return std::nullopt;
  }
  // fp32 training has fp32 gradients already.
  opts.cluster.fp32Gradients = strategy.gradPrecision == "fp32" &&
                               opts.cluster.precision == Precision::BF16;
  double defaultPeak = opts.cluster.precision == Precision::FP32 ? 67 : 989;
  auto intra = positiveNumber("--intra-node-gbps", 450);
  auto inter = positiveNumber("--inter-node-gbps", 50);
  auto peak = positiveNumber("--peak-tflops", defaultPeak);
  if (!seq || !top || !intra || !inter || !peak)
    return std::nullopt;
  if (*gpus > *perNode && *gpus % *perNode != 0) {
    fail("--gpus " + std::to_string(*gpus) +
         " is not a multiple of --gpus-per-node " + std::to_string(*perNode) +
         "; a plan places whole nodes");
    return std::nullopt;
  }
  opts.cluster.gpus = *gpus;
  opts.cluster.gpusPerNode = *perNode;
  opts.cluster.memoryBytes = *memory * kGB;
  opts.cluster.intraNodeBandwidth = *intra * 1e9;
  opts.cluster.interNodeBandwidth = *inter * 1e9;
  opts.cluster.peakFlops = *peak * 1e12;
  opts.work.batch = *batch;
  opts.work.seq = *seq;
  opts.top = *top;

  if (meshAxes.count("dp"))
    opts.dp = strategy.mesh.at("dp");
  if (meshAxes.count("tp"))
    opts.tp = strategy.mesh.at("tp");
  if (meshAxes.count("pp"))
    opts.pp = strategy.mesh.at("pp");
  if (values.count("--zero"))
    opts.zero = strategy.zero;
  if (values.count("--microbatches"))
    opts.microbatches = strategy.microbatches;
  if (values.count("--virtual-stages"))
    opts.virtualStages = strategy.virtualStages;
  if (values.count("--schedule"))
    opts.schedule = strategy.schedule == "gpipe"  ? Schedule::GPipe
                    : strategy.schedule == "1f1b" ? Schedule::OneFOneB
                                                  : Schedule::Interleaved;
  if (values.count("--recompute"))
    opts.recompute = strategy.recompute == "none"        ? Recompute::None
                     : strategy.recompute == "selective" ? Recompute::Selective
                                                         : Recompute::Full;
  return opts;
}

//===----------------------------------------------------------------------===//
// 2. The model
//===----------------------------------------------------------------------===//

/// Imports `path` with the GPT importer and reads its shape and Φ through
/// measureModel (what --loom-summary prints). Resolves `seq` 0 to
/// n_positions.
std::optional<ModelShape> loadModel(const std::string &path, int64_t &seq) {
  auto text = llvm::MemoryBuffer::getFile(path);
  if (!text) {
    fail("cannot read config '" + path + "': " + text.getError().message());
    return std::nullopt;
  }
  llvm::Expected<mlir::loom::GPTConfig> config =
      mlir::loom::parseGPTConfig((*text)->getBuffer(), /*batch=*/1, seq);
  if (!config) {
    fail(path + ": " + llvm::toString(config.takeError()));
    return std::nullopt;
  }
  mlir::MLIRContext context;
  context.loadDialect<mlir::loom::LoomDialect, mlir::func::FuncDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::loom::buildGPTModel(&context, *config);
  std::optional<mlir::loom::ModelFigures> figures;
  for (auto func : module->getOps<mlir::func::FuncOp>())
    if (func->hasAttr(mlir::loom::LoomDialect::kModelAttr))
      figures = mlir::loom::measureModel(func);
  if (!figures || figures->numBlocks != config->nLayer) {
    fail(path + ": the imported model has no transformer blocks to plan");
    return std::nullopt;
  }
  ModelShape shape;
  shape.layers = config->nLayer;
  shape.heads = config->nHead;
  shape.hidden = config->nEmbd;
  shape.vocab = config->vocabSize;
  shape.positions = config->nPositions;
  shape.params = figures->params;
  shape.paramsPerBlock = figures->paramsInBlocks / figures->numBlocks;
  shape.embeddingParams = config->vocabSize * config->nEmbd;
  for (const auto &[name, count] : figures->outsideBlocks)
    if (name == "wte.weight")
      shape.embeddingParams = count;
  shape.otherParams =
      shape.params - figures->paramsInBlocks - shape.embeddingParams;
  seq = config->seq;
  return shape;
}

} // namespace

int loom::cli::runPlan(const std::vector<std::string> &args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    llvm::outs() << kPlanUsage;
    return 0;
  }
  std::optional<PlanOptions> opts = parseFlags(args);
  if (!opts)
    return 1;

  // 2. The model, read off the imported IR.
  auto importStart = std::chrono::steady_clock::now();
  std::optional<ModelShape> model = loadModel(opts->config, opts->work.seq);
  if (!model)
    return 1;
  double importSeconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - importStart)
                             .count();

  // 3. Every plan.
  SearchResult result = searchPlans(*model, *opts);
  if (result.evaluated == 0) {
    std::string why =
        "no valid plan for --gpus " + std::to_string(opts->cluster.gpus);
    // A mesh with two axes given determines the third.
    int64_t G = opts->cluster.gpus;
    std::optional<int64_t> dp = opts->dp, tp = opts->tp, pp = opts->pp;
    if (!dp && tp && pp && G % (*tp * *pp) == 0)
      dp = G / (*tp * *pp);
    if (dp && !tp && pp && G % (*dp * *pp) == 0)
      tp = G / (*dp * *pp);
    if (dp && tp && !pp && G % (*dp * *tp) == 0)
      pp = G / (*dp * *tp);
    if (dp && tp && pp) {
      Plan plan{*dp,
                *tp,
                *pp,
                (int)opts->zero.value_or(0),
                opts->microbatches.value_or(1),
                opts->schedule.value_or(Schedule::OneFOneB),
                opts->virtualStages.value_or(1),
                opts->recompute.value_or(Recompute::None)};
      std::string reason = checkPlan(*model, opts->cluster, opts->work, plan);
      if (!reason.empty())
        why += ": " + reason;
    } else {
      why += " matches the restrictions";
    }
    for (const std::string &line : result.excluded)
      why += "\n  " + line;
    return fail(why);
  }
  if (result.fitting.empty()) {
    fail(noPlanFitsMessage(result, *opts));
    printRejected(llvm::errs(), result, *opts);
    return 1;
  }

  // 4. Report.
  if (opts->json)
    printPlanJson(llvm::outs(), *model, *opts, result, importSeconds);
  else
    printPlanReport(llvm::outs(), *model, *opts, result, importSeconds);
  return 0;
}
