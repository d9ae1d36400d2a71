//===- loom.cpp - The umbrella CLI: compile, eval, train --------*- C++ -*-===//
//
//   loom compile --config C.json [--batch B] [--seq T] [--train ...]
//                [strategy] -o OUT.loom
//   loom eval    --config C.json --data TOK.bin --steps N [run flags]
//   loom train   --config C.json --data TOK.bin --steps N [run flags]
//                [optimizer flags]
//   loom plan    --config C.json --gpus G --gpu-mem-gb M --batch B ...
//
// `compile` runs the whole compiler in process (import, passes, program
// emission); `eval` and `train` compile to a temporary program and launch
// loom-run, which lives next to this binary; `plan` searches parallel
// strategies with an analytic cost model (Plan.cpp).
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/Models/GPTModel.h"
#include "passes/Lowering/ProgramEmitter.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "tools/loom/ChildProcess.h"
#include "tools/loom/NodeRanks.h"
#include "tools/loom/Placement.h"
#include "tools/loom/Plan.h"
#include "tools/loom/StrategyFlags.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <vector>

using namespace mlir;
using namespace ::loom::cli;

namespace {

const char *kUsage =
    R"(usage:   (--config CFG.json may be replaced by --model FILE.mlir)
  loom compile --config CFG.json [--batch B] [--seq T] [strategy flags] -o OUT.loom
               [--emit-ir OUT.mlir] [--report [--gpus-per-node K]] [--timing]
               [--schedule-svg F.svg]
               [--train [optimizer flags]]
  loom eval    --config CFG.json --data TOKENS.bin --steps N [--batch B] [--seq T]
               [--seed S] [--load-checkpoint F] [--save-checkpoint F]
               [--log-json F] [--trace F.json] [--quiet] [strategy flags]
  loom train   (the flags of eval) [optimizer flags]
  loom sample  --config CFG.json --load-checkpoint F --prompt TEXT [--tokens N]
               [--seq T] [--temperature T [--top-k K] [--seed S]]
               [--tokenizer TOK.bin] [--prompt-tokens IDS] [--log-json F]
               generation from a trained model: greedy, or drawn from
               softmax(logits / T) over the K likeliest (nanoGPT's sample.py
               --temperature --top_k). Tokens are bytes, or with --tokenizer
               (an llm.c tokenizer file, e.g. gpt2_tokenizer.bin, or one
               scripts/tokenize --bpe-vocab wrote) GPT-2 BPE: the prompt is
               encoded as tiktoken does, the text decoded, and without a
               prompt sampling starts from <|endoftext|>. --log-json F
               records the prompt's and the sampled token ids and each
               sampled token's log-probability. The model is also compiled
               at halved seqs (down to 16): a context that fits one runs
               that shorter program, with the same results.
  loom plan    --config CFG.json --gpus G --gpu-mem-gb M --batch B [--seq T]
               [--gpus-per-node K] [--json] ...   search dp x tp x pp, ZeRO,
               micro-batches, schedule and recomputation (loom plan --help)

  --batch (global rows per step) defaults to 8, --seq to the config's n_positions.
  --timing prints the time of each compiler phase (model import, every pass,
  program emission) on stderr, as loom-opt --mlir-timing does.
  --report prints what each rank holds and sends; with --mesh pp=P also the
  simulated pipeline schedule (bubble fraction, activations in flight), and
  --schedule-svg F.svg draws it. The pipeline's cost model assumes
  --peak-tflops 100 and --bandwidth-gbs 2000 (their ratio moves the cut;
  compile, eval, train) and free links between stages (--link-gbs G:
  compile's report). On more than one rank the report ends with the
  placement: rank = tp + T*(dp + D*pp) (tp fastest, so TP groups stay inside
  a node of --gpus-per-node K GPUs, default 8), the groups per axis and
  whether they cross nodes, and the coordinates of every rank.
optimizer flags (train):
  --lr 1e-3 --min-lr 0 --warmup 0 --lr-schedule cosine|constant|linear|wsd
  --decay-fraction 0.2 (wsd: the last share of the steps after warmup decays)
  --schedule-steps S
  --wd 0.01 --clip 1.0 --beta1 0.9 --beta2 0.999 --eps 1e-8
  --microbatches M splits each step's batch into M accumulated micro-batches.
  --save-every N also saves --save-checkpoint F after every N steps ("{step}"
    in F: one file per save, e.g. ckpt-{step}.safetensors; else F is replaced).
  --time-limit M stops after the first step ending M minutes after the start,
    saving --save-checkpoint (Megatron's --exit-duration-in-mins; exit 0).
  --peak-tflops F (one device's peak, TFLOP/s) also has loom-run report each
    step's model FLOPs utilization (MFU: 6N + 6LCT FLOPs per token, as llm.c
    and torchtitan count) against F; --backend cuda knows the H100, H200 and
    A100 bf16 peaks without it.
  --shuffle reads the --data sequences in a new order each epoch (seeded by
    --seed; every sequence once per epoch; a resumed run continues the order).
  --data and --val-data take a token file or a quoted glob pattern of shards
    ('data/train_*.bin': the files in sorted order, as llm.c reads them).
  --val-data F [--eval-every N] [--eval-steps K]: validation loss of the
    weights on K batches of F (default: F's batches, at most 100) after every
    N steps and after the last, logged as {"step", "val_loss"}.
  With --mesh pp=P, eval runs forward-only through the pipeline stages and
  --microbatches M splits each evaluated batch into M pipelined micro-batches.
strategy flags:
  --mesh dp=D,tp=T,pp=P  --zero 0..3  --microbatches M  --bucket-mb 25
  --recompute none|selective|full (selective: each block's GELU output
    recomputed in its backward, llm.c's --recompute 1; full: the whole
    block's forward re-run from its input; none keeps the activations)
  --vocab-divisible-by 128 (as Megatron's --make-vocab-size-divisible-by: a
    vocabulary tp does not divide is padded to a multiple of this x tp rows;
    at tp = 1 one that is not a multiple of this is padded to one, 50257 ->
    50304; checkpoints keep the real rows; 1: no padding at tp = 1)
  --schedule gpipe|1f1b|interleaved  --virtual-stages V  --sequence-parallel
  --backend cpu|cuda  --precision fp32|bf16  --grad-precision bf16|fp32
  On more than one rank eval and train start one loom-run per rank: under
  mpirun for --backend cpu (MPI), themselves for --backend cuda (NCCL, no
  MPI needed: rank r takes GPU r; the first rank to fail ends the others).
  --nodes N --node-rank R --rendezvous F (--backend cuda): this node's share
    of a job over N nodes, as torchrun's --nnodes / --node-rank: run the same
    command on every node (R = 0..N-1), each starting world size / N ranks;
    F is a fresh path every node sees, where rank 0 leaves the NCCL id
    (removed when node 0's ranks end).
  --precision bf16 compiles bf16 mixed precision (--loom-mixed-precision):
  bf16 weights, activations and gradients (and collectives), fp32 master
  weights and AdamW moments, fp32 loss and norms: 16 bytes of model state
  per parameter, which ZeRO shards as 4+12/N, 2+14/N and 16/N.
  --grad-precision fp32 (with --precision bf16) accumulates, reduces and
  clips the gradients in fp32, as Megatron's --accumulate-allreduce-grads-
  in-fp32: 18 bytes per parameter (2+16/N under ZeRO-2), and gradient
  collectives move 4-byte elements.
  --sequence-parallel (with --mesh tp=T, T > 1) also splits the residual stream
  (embedding output, layer norms, residual adds) on the sequence over tp, as
  Megatron-LM's --sequence-parallel: each tp all-reduce becomes a reduce-scatter
  plus an all-gather of the same volume; --seq must be divisible by T.
)";

int fail(const std::string &command, const std::string &message) {
  llvm::errs() << "loom " << command << ": error: " << message << "\n";
  return 1;
}

/// Flags of one subcommand: value flags by name, plus the strategy.
struct Invocation {
  std::string command;
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  Strategy strategy;
};

/// Parses `--flag value` / `--flag=value` against the allowed flags.
std::optional<Invocation> parse(const std::string &command,
                                std::vector<std::string> args,
                                const std::set<std::string> &valueFlags,
                                const std::set<std::string> &switchFlags) {
  Invocation inv;
  inv.command = command;
  // The flag whose value the previous argument was (a stray argument after
  // --data's is most likely a pattern the shell expanded).
  std::string previousFlag;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string valueOf = previousFlag;
    previousFlag.clear();
    std::string flag = args[i], value;
    bool inlineValue = false;
    if (size_t eq = flag.find('='); eq != std::string::npos &&
                                    flag.rfind("--", 0) == 0) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inlineValue = true;
    }
    if (flag == "-o")
      flag = "--output";
    bool needsValue = valueFlags.count(flag) || strategyFlagTakesValue(flag);
    if (needsValue && !inlineValue) {
      if (i + 1 >= args.size()) {
        fail(command, flag + " needs a value");
        return std::nullopt;
      }
      value = args[++i];
      previousFlag = flag;
    } else if (inlineValue) {
      previousFlag = flag;
    }
    std::string error;
    if (parseStrategyFlag(flag, value, inv.strategy, error)) {
      if (!error.empty()) {
        fail(command, error);
        return std::nullopt;
      }
      continue;
    }
    if (valueFlags.count(flag)) {
      inv.values[flag] = value;
    } else if (switchFlags.count(flag) && !inlineValue) {
      inv.switches.insert(flag);
    } else if ((valueOf == "--data" || valueOf == "--val-data") &&
               args[i].rfind("-", 0) != 0) {
      fail(command, "unexpected argument '" + args[i] + "' after " + valueOf +
                        "'s value: " + valueOf +
                        " takes one token file or a glob pattern naming "
                        "shards, quoted so that the shell passes it whole (" +
                        valueOf + " 'data/train_*.bin')");
      return std::nullopt;
    } else {
      fail(command, "unknown argument '" + args[i] + "'\n" + kUsage);
      return std::nullopt;
    }
  }
  return inv;
}

std::optional<int64_t> intFlag(const Invocation &inv, const std::string &flag,
                               int64_t fallback, int64_t minimum) {
  auto it = inv.values.find(flag);
  if (it == inv.values.end())
    return fallback;
  int64_t value;
  if (llvm::StringRef(it->second).getAsInteger(10, value) || value < minimum) {
    fail(inv.command, flag + " needs an integer >= " +
                          std::to_string(minimum) + ", got '" + it->second +
                          "'");
    return std::nullopt;
  }
  return value;
}

std::optional<double> doubleFlag(const Invocation &inv, const std::string &flag,
                                 double fallback) {
  auto it = inv.values.find(flag);
  if (it == inv.values.end())
    return fallback;
  double value;
  if (llvm::StringRef(it->second).getAsDouble(value) || !std::isfinite(value)) {
    fail(inv.command, flag + " needs a number, got '" + it->second + "'");
    return std::nullopt;
  }
  return value;
}

/// Compiles the model of `--config` into a program file at `output`; with
/// `train`, the program is a training step (autodiff + AdamW).
int compileProgram(const Invocation &inv, const std::string &output,
                   bool train) {
  auto configIt = inv.values.find("--config");
  auto modelIt = inv.values.find("--model");
  if ((configIt == inv.values.end()) == (modelIt == inv.values.end()))
    return fail(inv.command,
                std::string("give exactly one of --config CFG.json (a GPT-2 "
                            "config) and --model FILE.mlir (model IR)\n") +
                    kUsage);
  if (modelIt != inv.values.end() &&
      (inv.values.count("--batch") || inv.values.count("--seq") ||
       inv.strategy.microbatches != 1))
    return fail(inv.command, "--model FILE.mlir fixes the batch and sequence "
                             "in its types; drop --batch, --seq and "
                             "--microbatches (or use --config)");
  std::string error;
  if (!checkStrategySupported(inv.strategy, train, error))
    return fail(inv.command, error);
  std::optional<int64_t> batch = intFlag(inv, "--batch", 8, 1);
  std::optional<int64_t> seq = intFlag(inv, "--seq", 0, 1);
  std::optional<int64_t> gpusPerNode = intFlag(inv, "--gpus-per-node", 8, 1);
  if (!batch || !seq || !gpusPerNode)
    return 1;
  if (inv.values.count("--gpus-per-node") && !inv.switches.count("--report"))
    return fail(inv.command, "--gpus-per-node places the ranks on nodes in "
                             "the placement --report prints; add --report "
                             "(or drop the flag)");
  int64_t microbatches = inv.strategy.microbatches;
  int64_t dp = inv.strategy.mesh.at("dp");
  bool fromConfig = configIt != inv.values.end();
  if (fromConfig && *batch % microbatches != 0)
    return fail(inv.command, "--batch " + std::to_string(*batch) +
                                 " is not divisible by --microbatches " +
                                 std::to_string(microbatches) +
                                 "; every micro-batch needs the same rows");
  if (fromConfig && *batch % (microbatches * dp) != 0)
    return fail(inv.command, "--batch " + std::to_string(*batch) +
                                 " is not divisible by dp x microbatches = " +
                                 std::to_string(dp * microbatches) +
                                 "; every data-parallel rank needs the same "
                                 "rows in every micro-batch");
  mlir::loom::CompilePipelineOptions pipeline;
  pipeline.train = train;
  pipeline.microbatches = microbatches;
  // Optimizer hyperparameters compiled into the training step.
  auto optimizerFlag = [&](const char *flag, double fallback, double lo,
                           double hi, const char *range) -> std::optional<double> {
    std::optional<double> v = doubleFlag(inv, flag, fallback);
    if (v && (*v < lo || *v > hi)) {
      fail(inv.command, std::string(flag) + " " + inv.values.at(flag) +
                            " must be " + range);
      return std::nullopt;
    }
    return v;
  };
  std::optional<double> clip =
      optimizerFlag("--clip", 1.0, -1e30, 1e30, "a number (<= 0: no clipping)");
  std::optional<double> beta1 =
      optimizerFlag("--beta1", 0.9, 0.0, 0.999999, "in [0, 1)");
  std::optional<double> beta2 =
      optimizerFlag("--beta2", 0.999, 0.0, 0.999999, "in [0, 1)");
  std::optional<double> eps = optimizerFlag("--eps", 1e-8, 1e-30, 1.0, "in (0, 1]");
  std::optional<double> wd = optimizerFlag("--wd", 0.01, 0.0, 1e6, ">= 0");
  if (!clip || !beta1 || !beta2 || !eps || !wd)
    return 1;
  pipeline.maxNorm = *clip;
  pipeline.beta1 = *beta1;
  pipeline.beta2 = *beta2;
  pipeline.eps = *eps;
  pipeline.weightDecay = *wd;

  // `--timing`: MLIR's execution time report over the whole compile, one
  // line per phase, printed on stderr when `timing` goes out of scope.
  DefaultTimingManager timing;
  timing.setEnabled(inv.switches.count("--timing") > 0);
  TimingScope rootTimer = timing.getRootScope();
  TimingScope importTimer = rootTimer.nest("ModelImport");

  MLIRContext context;
  context.loadDialect<mlir::loom::LoomDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module;
  if (modelIt != inv.values.end()) {
    // Model IR written by hand (or by another front end).
    llvm::SourceMgr sourceMgr;
    SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    module = parseSourceFile<ModuleOp>(modelIt->second, sourceMgr,
                                       ParserConfig(&context));
    if (!module)
      return fail(inv.command, "cannot load model IR '" + modelIt->second +
                                   "' (diagnostics above)");
    for (auto func : module->getOps<func::FuncOp>())
      if (auto cfg = func->getAttrOfType<DictionaryAttr>(
              mlir::loom::LoomDialect::kModelAttr))
        if (auto rows = cfg.getAs<IntegerAttr>("batch"))
          if (rows.getInt() % dp != 0)
            return fail(inv.command,
                        "the model's batch " + std::to_string(rows.getInt()) +
                            " rows is not divisible by dp = " +
                            std::to_string(dp));
  } else {
    const std::string &configPath = configIt->second;
    auto text = llvm::MemoryBuffer::getFile(configPath);
    if (!text)
      return fail(inv.command, "cannot read config '" + configPath +
                                   "': " + text.getError().message());
    // The model IR holds one micro-batch; the program runs M of them a step.
    llvm::Expected<mlir::loom::GPTConfig> config = mlir::loom::parseGPTConfig(
        (*text)->getBuffer(), *batch / microbatches, *seq);
    if (!config)
      return fail(inv.command,
                  configPath + ": " + llvm::toString(config.takeError()));
    module = mlir::loom::buildGPTModel(&context, *config);
  }
  // A model file may declare the mesh its hand-written shardings refer to;
  // it must agree with --mesh, and is replaced by the full one.
  std::string meshName = "mesh";
  bool fileMesh = false;
  {
    SmallVector<mlir::loom::MeshOp> meshes(
        module->getOps<mlir::loom::MeshOp>());
    if (meshes.size() > 1)
      return fail(inv.command, "the model declares " +
                                   std::to_string(meshes.size()) +
                                   " loom.mesh ops; a program is partitioned "
                                   "over one");
    if (!meshes.empty()) {
      mlir::loom::MeshAttr shape = meshes.front().getShape();
      for (auto [name, size] :
           llvm::zip(shape.getAxisNames(), shape.getAxisSizes())) {
        auto it = inv.strategy.mesh.find(name.str());
        if (it == inv.strategy.mesh.end())
          return fail(inv.command, "the model's loom.mesh has axis '" +
                                       name.str() +
                                       "'; the axes are dp, tp and pp");
        if (it->second != size)
          return fail(inv.command,
                      "the model's loom.mesh @" +
                          meshes.front().getSymName().str() + " declares " +
                          name.str() + " = " + std::to_string(size) +
                          " but --mesh gives " + name.str() + "=" +
                          std::to_string(it->second) + "; make them agree");
      }
      meshName = meshes.front().getSymName().str();
      meshes.front().erase();
      fileMesh = true;
    }
  }
  if (inv.strategy.worldSize() > 1 || fileMesh) {
    // The device mesh the program is partitioned over.
    OpBuilder b(&context);
    b.setInsertionPointToStart(module->getBody());
    SmallVector<StringAttr> names;
    SmallVector<int64_t> sizes;
    // Ranks are laid out row-major over the mesh (first axis slowest), so
    // this order is the placement: rank = tp + T*(dp + D*pp). tp varies
    // fastest and a TP group (T consecutive ranks) stays inside a node, then
    // dp (gradient traffic); pp, which only sends activations point to
    // point, crosses nodes first (Megatron-LM's order). `loom plan` assumes
    // the same layout (Placement in PlanModel.h).
    for (const char *axis : {"pp", "dp", "tp"}) {
      names.push_back(b.getStringAttr(axis));
      sizes.push_back(inv.strategy.mesh.at(axis));
    }
    mlir::loom::MeshOp::create(
        b, module->getLoc(), meshName,
        mlir::loom::MeshAttr::get(&context, names, sizes));
    // Partitioning splits over the axes other than pp (which the pipeline
    // pass cuts along).
    int64_t pp = inv.strategy.mesh.at("pp");
    pipeline.partition = inv.strategy.worldSize() / pp > 1;
    pipeline.pipelineStages = pp;
    pipeline.schedule = inv.strategy.schedule;
    pipeline.virtualStages = inv.strategy.virtualStages;
    pipeline.zeroStage = inv.strategy.zero;
    pipeline.tensorParallel = inv.strategy.mesh.at("tp") > 1;
    pipeline.sequenceParallel = inv.strategy.sequenceParallel;
    pipeline.bucketMb = inv.strategy.bucketMb;
  }
  // Vocabulary padding: by --loom-tensor-parallel when tp splits the
  // table, else by --loom-pad-vocab (one rank too).
  pipeline.vocabDivisibleBy = inv.strategy.vocabDivisibleBy;
  pipeline.recompute = inv.strategy.recompute;
  pipeline.precision = inv.strategy.precision;
  if (!inv.strategy.gradPrecision.empty())
    pipeline.gradPrecision = inv.strategy.gradPrecision;
  // The machine the pipeline's cost model assumes (its balance moves the
  // cut; the report's times and the program's predicted bubble use it).
  std::optional<double> linkGbs;
  for (const char *flag : {"--peak-tflops", "--bandwidth-gbs", "--link-gbs"}) {
    if (!inv.values.count(flag))
      continue;
    // train's --peak-tflops is also the peak loom-run reports MFU against.
    const bool mfuPeak =
        inv.command == "train" && std::string(flag) == "--peak-tflops";
    if (inv.strategy.mesh.at("pp") == 1 && !mfuPeak)
      return fail(inv.command,
                  std::string(flag) + " sets the cost model the pipeline "
                                      "stages are balanced and simulated "
                                      "on; it needs --mesh pp=P with P > 1");
    std::optional<double> value = doubleFlag(inv, flag, 0.0);
    if (!value)
      return 1;
    if (!(*value > 0))
      return fail(inv.command, std::string(flag) + " needs a positive "
                                                   "number, got '" +
                                   inv.values.at(flag) + "'");
    if (std::string(flag) == "--peak-tflops")
      pipeline.peakTflops = *value;
    else if (std::string(flag) == "--bandwidth-gbs")
      pipeline.bandwidthGbs = *value;
    else
      linkGbs = *value;
  }
  if (linkGbs && !inv.switches.count("--report") &&
      !inv.values.count("--schedule-svg"))
    return fail(inv.command, "--link-gbs only changes the simulated "
                             "schedule that --report prints (and "
                             "--schedule-svg draws); add --report");
  importTimer.stop();
  PassManager pm(&context);
  mlir::loom::buildCompilePipeline(pm, pipeline);
  if (timing.isEnabled())
    pm.enableTiming(rootTimer);
  if (failed(pm.run(*module)))
    return fail(inv.command, "compilation failed (diagnostics above)");

  auto svg = inv.values.find("--schedule-svg");
  if (svg != inv.values.end() && inv.strategy.mesh.at("pp") == 1)
    return fail(inv.command, "--schedule-svg draws a pipeline schedule; it "
                             "needs --mesh pp=P with P > 1");
  if (inv.switches.count("--report") || svg != inv.values.end()) {
    // What each rank will hold and send, before anything runs; for a
    // pipeline also the simulated schedule (bubble, activations in flight).
    PassManager report(&context);
    if (inv.switches.count("--report"))
      report.addPass(mlir::loom::createLoomReport());
    if (inv.strategy.mesh.at("pp") > 1) {
      mlir::loom::LoomPipelineReportOptions options;
      options.print = inv.switches.count("--report") > 0;
      options.peakTflops = pipeline.peakTflops;
      options.bandwidthGbs = pipeline.bandwidthGbs;
      if (linkGbs)
        options.linkGbs = *linkGbs;
      if (svg != inv.values.end())
        options.svg = svg->second;
      report.addPass(mlir::loom::createLoomPipelineReport(options));
    }
    if (timing.isEnabled())
      report.enableTiming(rootTimer);
    if (failed(report.run(*module)))
      return fail(inv.command, "the report failed (diagnostics above)");
    if (inv.switches.count("--report") && inv.strategy.worldSize() > 1) {
      // Which rank holds which coordinates, and which groups share a node:
      // the layout the mesh above gives the runtime's communicator.
      ::loom::plan::Placement placement{
          inv.strategy.mesh.at("dp"), inv.strategy.mesh.at("tp"),
          inv.strategy.mesh.at("pp"), *gpusPerNode};
      ::loom::plan::printPlacementGroups(llvm::outs(), placement);
      ::loom::plan::printRankTable(llvm::outs(), placement, /*maxRows=*/64);
    }
  }
  if (auto ir = inv.values.find("--emit-ir"); ir != inv.values.end()) {
    TimingScope printTimer = rootTimer.nest("PrintIR");
    std::error_code ec;
    llvm::raw_fd_ostream os(ir->second, ec);
    if (ec)
      return fail(inv.command, "cannot write '" + ir->second +
                                   "': " + ec.message());
    module->print(os);
  }

  // Write next to the target and rename, so a reader never sees half a file.
  std::string temp = output + ".tmp";
  {
    TimingScope emitTimer = rootTimer.nest("ProgramEmission");
    std::error_code ec;
    llvm::raw_fd_ostream os(temp, ec, llvm::sys::fs::OF_None);
    if (ec)
      return fail(inv.command, "cannot write '" + output +
                                   "': " + ec.message());
    if (failed(mlir::loom::emitProgram(*module, os)))
      return fail(inv.command, "program emission failed (diagnostics above)");
  }
  if (std::error_code ec = llvm::sys::fs::rename(temp, output))
    return fail(inv.command, "cannot write '" + output + "': " + ec.message());
  return 0;
}

int runCompile(std::vector<std::string> args) {
  auto inv = parse("compile", std::move(args),
                   {"--config", "--model", "--batch", "--seq", "--output",
                    "--emit-ir", "--schedule-svg", "--gpus-per-node",
                    "--peak-tflops", "--bandwidth-gbs", "--link-gbs",
                    "--wd", "--clip", "--beta1", "--beta2", "--eps"},
                   {"--train", "--report", "--timing"});
  if (!inv)
    return 1;
  auto out = inv->values.find("--output");
  if (out == inv->values.end())
    return fail("compile", std::string("-o OUT.loom is required\n") + kUsage);
  if (int rc = compileProgram(*inv, out->second, inv->switches.count("--train")))
    return rc;
  llvm::outs() << "loom compile: wrote " << out->second << "\n";
  return 0;
}

/// The seq compileProgram compiled `inv` at (it succeeded, so the flag and
/// the config parse): --seq, else the config's n_positions.
int64_t compiledSeq(const Invocation &inv) {
  int64_t seq = 0;
  if (auto it = inv.values.find("--seq"); it != inv.values.end())
    return llvm::StringRef(it->second).getAsInteger(10, seq) ? 0 : seq;
  auto text = llvm::MemoryBuffer::getFile(inv.values.at("--config"));
  if (!text)
    return 0;
  llvm::Expected<mlir::loom::GPTConfig> config =
      mlir::loom::parseGPTConfig((*text)->getBuffer(), 1, 0);
  if (!config) {
    llvm::consumeError(config.takeError());
    return 0;
  }
  return config->seq;
}

/// `loom eval` and `loom train`: compile, then run loom-run on it.
int runProgram(const char *argv0, const std::string &command,
               std::vector<std::string> args) {
  bool train = command == "train";
  bool sample = command == "sample";
  std::set<std::string> valueFlags{"--config",
                                   "--model",
                                   "--batch",
                                   "--seq",
                                   "--data",
                                   "--steps",
                                   "--seed",
                                   "--load-checkpoint",
                                   "--save-checkpoint",
                                   "--log-json",
                                   "--trace",
                                   "--emit-ir",
                                   "--peak-tflops",
                                   "--bandwidth-gbs",
                                   "--nodes",
                                   "--node-rank",
                                   "--rendezvous"};
  // Optimizer flags: compiled into the program, or passed to the runtime.
  const std::vector<std::string> compiledFlags{"--wd", "--clip", "--beta1",
                                               "--beta2", "--eps"};
  // ... and the run's: the schedule, periodic checkpoints and validation.
  const std::vector<std::string> scheduleFlags{"--lr",
                                               "--min-lr",
                                               "--warmup",
                                               "--lr-schedule",
                                               "--schedule-steps",
                                               "--save-every",
                                               "--val-data",
                                               "--eval-every",
                                               "--eval-steps",
                                               "--decay-fraction",
                                               "--time-limit",
                                               "--peak-tflops"};
  if (train) {
    valueFlags.insert(compiledFlags.begin(), compiledFlags.end());
    valueFlags.insert(scheduleFlags.begin(), scheduleFlags.end());
  }
  if (sample)
    valueFlags = {"--config",        "--seq",     "--load-checkpoint",
                  "--prompt",        "--tokens",  "--temperature",
                  "--top-k",         "--seed",    "--tokenizer",
                  "--prompt-tokens", "--log-json"};
  std::set<std::string> switches{"--quiet"};
  if (train)
    switches.insert("--shuffle");
  auto inv = parse(command, std::move(args), valueFlags, switches);
  if (!inv)
    return 1;
  std::vector<const char *> required{"--data", "--steps"};
  if (sample) {
    required = {"--load-checkpoint"};
    // With a tokenizer, sampling may start from its end-of-text token.
    if (!inv->values.count("--tokenizer") &&
        !inv->values.count("--prompt-tokens"))
      required.push_back("--prompt");
    inv->values["--batch"] = "1"; // one sequence
  }
  for (const char *flag : required)
    if (!inv->values.count(flag))
      return fail(command, std::string(flag) + " is required\n" + kUsage);
  if (sample && inv->strategy.worldSize() > 1)
    return fail(command, "sampling runs on one rank (one sequence, "
                         "one token at a time); drop --mesh");
  ::loom::cli::NodeRanks node;
  std::string nodeError;
  if (!::loom::cli::planNodeRanks(inv->values, inv->strategy.worldSize(),
                                  inv->strategy.backend, node, nodeError))
    return fail(command, nodeError);

  // 1. Compile into a private temporary directory.
  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("loom-" + command, dir))
    return fail(command,
                "cannot create a temporary directory: " + ec.message());
  std::string program = (dir + "/program.loom").str();
  int rc = compileProgram(*inv, program, train);
  // Sampling runs the whole seq's forward per token: the same model at
  // halved seqs (down to 16) lets a short context run a short program
  // (runtime/core/sampling_contexts.h).
  std::string contextPrograms;
  if (rc == 0 && sample) {
    const int64_t seq = compiledSeq(*inv);
    for (int64_t shorter = seq / 2; rc == 0 && shorter >= 16; shorter /= 2) {
      Invocation at = *inv;
      at.values["--seq"] = std::to_string(shorter);
      const std::string path =
          (dir + "/seq" + std::to_string(shorter) + ".loom").str();
      rc = compileProgram(at, path, /*train=*/false);
      contextPrograms += (contextPrograms.empty() ? "" : ",") + path;
    }
  }

  // 2. Launch loom-run from this binary's directory.
  if (rc == 0) {
    std::string self = llvm::sys::fs::getMainExecutable(
        argv0, reinterpret_cast<void *>(&runProgram));
    llvm::SmallString<256> runner(llvm::sys::path::parent_path(self));
    llvm::sys::path::append(runner, "loom-run");
    if (!llvm::sys::fs::can_execute(runner)) {
      rc = fail(command, "cannot find loom-run next to loom (" +
                            runner.str().str() + "); build it with ninja");
    } else {
      // Idle OpenMP threads sleep unless the user chose (loom-run --help):
      // libgomp's default spins each one 300,000 times after every
      // parallel region, which on a machine busy with anything else takes
      // the cores a CPU run's working threads need (a 2-layer, 384-wide
      // model's 10 steps: 11.0-12.9 s spinning, 3.4-4.6 s sleeping beside
      // a build on 2 cores; the same alone). libgomp reads it when it loads,
      // so it is the child's environment that carries it.
      if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
        ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
      std::vector<std::string> runArgs{runner.str().str(), program};
      std::vector<std::string> runFlags{
          "--data",     "--steps", "--seed", "--load-checkpoint",
          "--save-checkpoint", "--log-json", "--trace"};
      if (train)
        runFlags.insert(runFlags.end(), scheduleFlags.begin(),
                        scheduleFlags.end());
      if (sample) {
        runFlags = {"--load-checkpoint", "--prompt",  "--temperature",
                    "--top-k",           "--seed",    "--tokenizer",
                    "--prompt-tokens",   "--log-json"};
        runArgs.push_back("--sample");
        runArgs.push_back(inv->values.count("--tokens")
                              ? inv->values["--tokens"]
                              : std::string("200"));
        if (!contextPrograms.empty()) {
          runArgs.push_back("--context-programs");
          runArgs.push_back(contextPrograms);
        }
      }
      for (const std::string &flag : runFlags)
        if (auto it = inv->values.find(flag); it != inv->values.end()) {
          runArgs.push_back(flag);
          runArgs.push_back(it->second);
        }
      runArgs.push_back("--backend");
      runArgs.push_back(inv->strategy.backend);
      for (const std::string &flag : switches)
        if (inv->switches.count(flag))
          runArgs.push_back(flag);
      int64_t ranks = inv->strategy.worldSize();
      std::string launcher = runner.str().str();
      // --backend cuda ranks need no MPI: one loom-run per rank of this
      // node, started here (ChildProcess.h, NodeRanks.h), NCCL
      // bootstrapping through a file (in the temporary directory on one
      // node); each rank takes device LOOM_LOCAL_RANK.
      const bool ownRanks = ranks > 1 && inv->strategy.backend == "cuda";
      const bool sharedRendezvous = !node.rendezvous.empty();
      if (!sharedRendezvous)
        node.rendezvous = (dir + "/nccl-id").str();
      if (ranks > 1 && !ownRanks) {
        // One loom-run per rank under OpenMPI's mpirun: allowed as root
        // (containers, CI), oversubscribed (more ranks than cores), one
        // OpenMP thread per rank.
        auto mpirun = llvm::sys::findProgramByName("mpirun");
        if (!mpirun) {
          llvm::sys::fs::remove_directories(dir);
          return fail(command, "--mesh needs " + std::to_string(ranks) +
                                   " ranks but mpirun is not on PATH; "
                                   "install openmpi-bin (scripts/setup)");
        }
        launcher = *mpirun;
        // A rank stopped by a signal exits 0 (else mpirun reports the job
        // aborted); the stop is this process's status (below).
        ::setenv("LOOM_STOP_EXIT_STATUS", "0", 1);
        ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        // --stdin none: mpirun runs in a background process group of its
        // own (ChildProcess.h), where reading the terminal would stop it.
        std::vector<std::string> mpiArgs{launcher,
                                         "-np",
                                         std::to_string(ranks),
                                         "--oversubscribe",
                                         "--stdin",
                                         "none",
                                         "-x",
                                         "OMP_NUM_THREADS=1",
                                         "-x",
                                         "LOOM_STOP_EXIT_STATUS"};
        runArgs.insert(runArgs.begin(), mpiArgs.begin(), mpiArgs.end());
      }
      const ::loom::cli::ChildResult child =
          ownRanks ? ::loom::cli::runRanksPassingOnStopSignals(
                         runArgs, static_cast<int>(node.localRanks),
                         [&](int rank) {
                           std::vector<std::string> env =
                               ::loom::cli::rankEnvironment(node, rank);
                           // One OpenMP thread per rank unless asked otherwise,
                           // as mpirun is told above (and torchrun does).
                           if (!std::getenv("OMP_NUM_THREADS"))
                             env.push_back("OMP_NUM_THREADS=1");
                           return env;
                         })
                   : ::loom::cli::runPassingOnStopSignals(runArgs, ranks > 1);
      // Node 0's rank 0 wrote the shared rendezvous file; every rank has
      // read it by the first step, so the path is free for the next job.
      if (ownRanks && sharedRendezvous && node.nodeRank == 0)
        llvm::sys::fs::remove(node.rendezvous);
      rc = child.status;
      if (rc < 0)
        rc = fail(command, "loom-run did not finish: " + child.error);
      else if (child.stopSignal &&
               (rc == 0 || rc == 128 + SIGUSR1 || rc == 128 + child.stopSignal))
        // Stopped on request (loom-run said after which step; mpirun's
        // ranks exit 0 then, a lone loom-run 128 + the signal): the exit
        // status a shell gives a command the signal ended.
        rc = 128 + child.stopSignal;
    }
  }
  llvm::sys::fs::remove_directories(dir);
  return rc;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" ||
      std::string(argv[1]) == "-h") {
    llvm::outs() << kUsage;
    return argc < 2 ? 1 : 0;
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "compile")
    return runCompile(std::move(args));
  if (command == "plan")
    return ::loom::cli::runPlan(args);
  if (command == "eval" || command == "train" || command == "sample")
    return runProgram(argv[0], command, std::move(args));
  llvm::errs() << "loom: error: unknown command '" << command << "'\n"
               << kUsage;
  return 1;
}
