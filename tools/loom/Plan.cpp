//===- Plan.cpp - `loom plan`: search parallel plans ------------*- C++ -*-===//
//
// 1. Parse the flags; 2. import the config with the GPT importer and read Φ
// the way --loom-summary does; 3. enumerate every valid plan and predict it
// (PlanModel.h); 4. print the best that fit, why each rejected family does
// not fit, the chosen plan's figures and its rank placement (or JSON).
//
//===----------------------------------------------------------------------===//

#include "tools/loom/Plan.h"

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/Models/GPTModel.h"
#include "passes/Analysis/ModelSummary.h"
#include "tools/loom/PlanModel.h"
#include "tools/loom/StrategyFlags.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>

using namespace loom::plan;

const char *const loom::cli::kPlanUsage = R"(usage:
  loom plan --config CFG.json --gpus G --gpu-mem-gb M --batch B [--seq T]
            [--gpus-per-node K] [--intra-node-gbps BW] [--inter-node-gbps BW]
            [--peak-tflops F] [--precision bf16|fp32] [--top N] [--json]
            [--no-sequence-parallel] [restrictions]

  Searches dp x tp x pp = G (tp <= K and dividing n_head, pp <= n_layer, dp
  dividing B), ZeRO 0-3, micro-batches, pipeline schedule gpipe|1f1b|
  interleaved (+ virtual stages) and recomputation none|selective|full with
  an analytic cost model; prints the fastest plans that fit in M GB
  (10^9 bytes) per GPU, why each rejected family does not fit, and the
  chosen plan's memory, time and rank placement (--json: the best plan).

  --batch is the global batch in rows, --seq defaults to n_positions.
  --gpus-per-node 8; --intra-node-gbps 450 (NVLink, per GPU and direction);
  --inter-node-gbps 50 (4 x 100 Gb/s InfiniBand); --peak-tflops 989 (H100
  dense bf16; 67 with --precision fp32); --top 10. Tensor parallelism comes
  with sequence parallelism unless --no-sequence-parallel.
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

struct PlanOptions {
  std::string config;
  Cluster cluster;
  Workload work;
  int64_t top = 10;
  bool json = false;
  /// Restrictions: only plans with these values are searched.
  std::optional<int64_t> dp, tp, pp, zero, microbatches, virtualStages;
  std::optional<Schedule> schedule;
  std::optional<Recompute> recompute;
};

std::optional<PlanOptions> parseFlags(const std::vector<std::string> &args) {
  const std::set<std::string> valueFlags{
      "--config",          "--gpus",          "--gpus-per-node",
      "--gpu-mem-gb",      "--batch",         "--seq",
      "--intra-node-gbps", "--inter-node-gbps", "--peak-tflops",
      "--top"};
  const std::set<std::string> restrictionFlags{
      "--mesh",     "--zero",           "--microbatches",
      "--schedule", "--virtual-stages", "--recompute",
      "--precision"};
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
  auto positiveInt = [&](const char *flag,
                         std::optional<int64_t> fallback) -> std::optional<int64_t> {
    auto it = values.find(flag);
    if (it == values.end()) {
      if (!fallback)
        fail(std::string(flag) + " is required\n" + ::loom::cli::kPlanUsage);
      return fallback;
    }
    int64_t v;
    if (llvm::StringRef(it->second).getAsInteger(10, v) || v < 1) {
      fail(std::string(flag) + " needs a positive integer, got '" +
           it->second + "'");
      return std::nullopt;
    }
    return v;
  };
  auto positiveNumber = [&](const char *flag,
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
      fail(std::string(flag) + " needs a positive number, got '" +
           it->second + "'");
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
  opts.cluster.precision = strategy.precision == "fp32" && values.count("--precision")
                               ? Precision::FP32
                               : Precision::BF16;
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

//===----------------------------------------------------------------------===//
// 3. The search
//===----------------------------------------------------------------------===//

/// What the search keeps of one evaluated plan.
struct Candidate {
  Plan plan;
  double stepS = 0, peakBytes = 0, mfu = 0, bubble = 0;
  double tpBytes = 0, dpBytes = 0, ppBytes = 0;
  double modelStateBytes = 0, activationBytes = 0, otherBytes = 0;
};

/// The plans of one (zero, tp) family.
struct Family {
  int64_t evaluated = 0, fits = 0;
  std::optional<Candidate> smallest; // the least peak memory
  std::optional<Candidate> fastest;  // the fastest that fits
};

struct SearchResult {
  std::vector<Candidate> fitting;
  std::optional<Candidate> fastest;  // ignoring memory
  std::optional<Candidate> smallest; // the least peak memory
  std::map<std::pair<int, int64_t>, Family> families;
  /// Mesh choices that are never valid, with the reason.
  std::vector<std::string> excluded;
  int64_t evaluated = 0;
  double seconds = 0;
};

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0)
      out.push_back(d);
  return out;
}

/// Ranking: the predicted step; on a tie (communication fully hidden) the
/// plan that sends less, then the one that needs less memory.
bool faster(const Candidate &a, const Candidate &b) {
  auto key = [](const Candidate &c) {
    return std::make_tuple(c.stepS, c.tpBytes + c.dpBytes + c.ppBytes,
                           c.peakBytes, c.plan.zero, c.plan.microbatches,
                           c.plan.pp, c.plan.tp);
  };
  return key(a) < key(b);
}

Candidate summarize(const Plan &plan, const PlanCost &cost) {
  Candidate c;
  c.plan = plan;
  c.stepS = cost.stepS;
  c.peakBytes = cost.peakBytes;
  c.mfu = cost.mfu;
  c.bubble = cost.bubble;
  c.tpBytes = cost.tpBytes;
  c.dpBytes = cost.dpBytes;
  c.ppBytes = cost.ppBytes;
  const StageMemory &st = cost.stages[cost.peakStage];
  c.modelStateBytes = st.modelStateBytes;
  c.activationBytes = st.activationBytes;
  c.otherBytes = st.gatheredBytes + st.workspaceBytes;
  return c;
}

SearchResult search(const ModelShape &model, const PlanOptions &opts) {
  auto start = std::chrono::steady_clock::now();
  SearchResult result;
  const Cluster &cluster = opts.cluster;
  const Workload &work = opts.work;
  const int64_t G = cluster.gpus, L = model.layers;
  auto str = [](int64_t v) { return std::to_string(v); };
  std::set<std::string> excludedOnce;
  auto exclude = [&](const std::string &why) {
    if (excludedOnce.insert(why).second)
      result.excluded.push_back(why);
  };

  for (int64_t tp : divisors(G)) {
    if (opts.tp && *opts.tp != tp)
      continue;
    if (tp > cluster.gpusPerNode) {
      exclude("tp=" + str(tp) + ": more than --gpus-per-node " +
              str(cluster.gpusPerNode) + " (a TP group stays inside a node)");
      continue;
    }
    if (model.heads % tp) {
      exclude("tp=" + str(tp) + ": does not divide n_head " +
              str(model.heads));
      continue;
    }
    for (int64_t pp : divisors(G / tp)) {
      if (opts.pp && *opts.pp != pp)
        continue;
      int64_t dp = G / (tp * pp);
      if (opts.dp && *opts.dp != dp)
        continue;
      if (pp > L) {
        exclude("pp=" + str(pp) + ": more stages than n_layer " + str(L));
        continue;
      }
      if (work.batch % dp) {
        exclude("dp=" + str(dp) + " (tp=" + str(tp) + " pp=" + str(pp) +
                "): does not divide --batch " + str(work.batch));
        continue;
      }
      for (int zero = 0; zero <= 3; ++zero) {
        if (opts.zero ? *opts.zero != zero : (dp == 1 && zero > 0))
          continue; // ZeRO over one rank is DDP
        for (int64_t m : divisors(work.batch / dp)) {
          if (opts.microbatches && *opts.microbatches != m)
            continue;
          // The schedules: one for pp = 1 (no pipeline).
          std::vector<std::pair<Schedule, int64_t>> schedules;
          if (pp == 1) {
            schedules.push_back({Schedule::OneFOneB, 1});
          } else {
            schedules.push_back({Schedule::GPipe, 1});
            if (m >= pp)
              schedules.push_back({Schedule::OneFOneB, 1});
            if (L % pp == 0 && m % pp == 0)
              for (int64_t v : divisors(L / pp))
                if (v >= 2)
                  schedules.push_back({Schedule::Interleaved, v});
          }
          for (auto [schedule, v] : schedules) {
            if (pp > 1 && opts.schedule && *opts.schedule != schedule)
              continue;
            if (opts.virtualStages && *opts.virtualStages != v)
              continue;
            for (Recompute rc :
                 {Recompute::None, Recompute::Selective, Recompute::Full}) {
              if (opts.recompute && *opts.recompute != rc)
                continue;
              Plan plan{dp, tp, pp, zero, m, schedule, v, rc};
              if (!checkPlan(model, cluster, work, plan).empty())
                continue;
              PlanCost cost = evaluatePlan(model, cluster, work, plan);
              Candidate c = summarize(plan, cost);
              ++result.evaluated;
              Family &family = result.families[{zero, tp}];
              ++family.evaluated;
              if (!family.smallest || c.peakBytes < family.smallest->peakBytes)
                family.smallest = c;
              if (!result.smallest || c.peakBytes < result.smallest->peakBytes)
                result.smallest = c;
              if (!result.fastest || faster(c, *result.fastest))
                result.fastest = c;
              if (cost.fits) {
                ++family.fits;
                if (!family.fastest || faster(c, *family.fastest))
                  family.fastest = c;
                result.fitting.push_back(c);
              }
            }
          }
        }
      }
    }
  }
  std::sort(result.fitting.begin(), result.fitting.end(), faster);
  result.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return result;
}

//===----------------------------------------------------------------------===//
// 4. Printing
//===----------------------------------------------------------------------===//

std::string gb(double bytes) {
  return llvm::formatv("{0:f1} GB", bytes / kGB).str();
}

std::string shortPlan(const Plan &p) {
  std::string s = llvm::formatv("dp={0} tp={1} pp={2} zero={3} mb={4}", p.dp,
                                p.tp, p.pp, p.zero, p.microbatches)
                      .str();
  if (p.pp > 1) {
    s += std::string(" ") + name(p.schedule);
    if (p.virtualStages > 1)
      s += " v=" + std::to_string(p.virtualStages);
  }
  return s + " recompute=" + name(p.recompute);
}

std::string loomFlags(const Plan &p, const PlanOptions &opts) {
  std::string s = llvm::formatv("--mesh dp={0},tp={1},pp={2} --zero {3} "
                                "--microbatches {4}",
                                p.dp, p.tp, p.pp, p.zero, p.microbatches)
                      .str();
  if (p.pp > 1) {
    s += std::string(" --schedule ") + name(p.schedule);
    if (p.virtualStages > 1)
      s += " --virtual-stages " + std::to_string(p.virtualStages);
  }
  s += std::string(" --recompute ") + name(p.recompute);
  if (p.tp > 1 && opts.work.sequenceParallel)
    s += " --sequence-parallel";
  return s + " --precision " + name(opts.cluster.precision);
}

std::string memoryBreakdown(const Candidate &c) {
  return "model state " + gb(c.modelStateBytes) + " + activations " +
         gb(c.activationBytes) + " + workspace " + gb(c.otherBytes);
}

void printTable(llvm::raw_ostream &os, const SearchResult &result,
                int64_t top) {
  os << llvm::formatv("{0,3} {1,4} {2,3} {3,3} {4,4} {5,6}  {6,-11} {7,2} "
                      "{8,-9} {9,9} {10,6} {11,8} {12,7} {13,8} {14,8} "
                      "{15,8}\n",
                      "#", "dp", "tp", "pp", "zero", "mb", "schedule", "v",
                      "recompute", "step_s", "MFU", "peak_GB", "bubble",
                      "tp_GB", "dp_GB", "pp_GB");
  int64_t shown = std::min<int64_t>(top, result.fitting.size());
  for (int64_t i = 0; i < shown; ++i) {
    const Candidate &c = result.fitting[i];
    const Plan &p = c.plan;
    bool pipe = p.pp > 1;
    os << llvm::formatv(
        "{0,3} {1,4} {2,3} {3,3} {4,4} {5,6}  {6,-11} {7,2} {8,-9} {9,9} "
        "{10,6} {11,8} {12,7} {13,8} {14,8} {15,8}\n",
        i + 1, p.dp, p.tp, p.pp, p.zero, p.microbatches,
        pipe ? name(p.schedule) : "-",
        pipe ? std::to_string(p.virtualStages) : std::string("-"),
        name(p.recompute), llvm::formatv("{0:f3}", c.stepS).str(),
        llvm::formatv("{0:f1}%", 100 * c.mfu).str(),
        llvm::formatv("{0:f1}", c.peakBytes / kGB).str(),
        llvm::formatv("{0:f2}%", 100 * c.bubble).str(),
        llvm::formatv("{0:f2}", c.tpBytes / kGB).str(),
        llvm::formatv("{0:f2}", c.dpBytes / kGB).str(),
        llvm::formatv("{0:f2}", c.ppBytes / kGB).str());
  }
}

/// The fastest plan that fits per (zero, tp) family, as a matrix.
void printFamilies(llvm::raw_ostream &os, const SearchResult &result) {
  std::set<int64_t> tps;
  std::set<int> zeros;
  for (const auto &[key, family] : result.families) {
    zeros.insert(key.first);
    tps.insert(key.second);
  }
  os << "fastest predicted step per family (s; \"-\": nothing fits):\n";
  os << "        ";
  for (int64_t tp : tps)
    os << llvm::formatv("{0,10}", "tp=" + std::to_string(tp));
  os << "\n";
  for (int zero : zeros) {
    os << llvm::formatv("  zero={0}", zero);
    for (int64_t tp : tps) {
      auto it = result.families.find({zero, tp});
      if (it == result.families.end() || !it->second.fastest)
        os << llvm::formatv("{0,10}", "-");
      else
        os << llvm::formatv("{0,10:f3}", it->second.fastest->stepS);
    }
    os << "\n";
  }
}

void printRejected(llvm::raw_ostream &os, const SearchResult &result,
                   const PlanOptions &opts) {
  bool any = false;
  for (const auto &[key, family] : result.families) {
    if (family.fits || !family.smallest)
      continue;
    if (!any)
      os << "rejected families (no plan in them fits in "
         << gb(opts.cluster.memoryBytes) << " per GPU):\n";
    any = true;
    const Candidate &c = *family.smallest;
    os << "  zero=" << key.first << ", tp=" << key.second << ": "
       << family.evaluated << " plans, the smallest needs " << gb(c.peakBytes)
       << " (" << shortPlan(c.plan) << "): " << memoryBreakdown(c) << "\n";
  }
  if (!any)
    os << "rejected families: none (every (zero, tp) family has a plan that "
          "fits)\n";
  if (!result.excluded.empty()) {
    os << "excluded mesh choices:\n";
    for (const std::string &why : result.excluded)
      os << "  " << why << "\n";
  }
}

std::string groupText(const std::vector<int64_t> &ranks) {
  std::string s = "[";
  auto add = [&](int64_t r) {
    if (s.size() > 1)
      s += " ";
    s += std::to_string(r);
  };
  if (ranks.size() <= 8) {
    for (int64_t r : ranks)
      add(r);
  } else {
    for (size_t i = 0; i < 3; ++i)
      add(ranks[i]);
    s += " ...";
    add(ranks.back());
  }
  return s + "]";
}

void printPlacement(llvm::raw_ostream &os, const Plan &p,
                    const Cluster &cluster) {
  Placement placement{p.dp, p.tp, p.pp, cluster.gpusPerNode};
  int64_t nodes =
      (cluster.gpus + cluster.gpusPerNode - 1) / cluster.gpusPerNode;
  int64_t firstNode = std::min(cluster.gpus, cluster.gpusPerNode);
  os << "placement: rank = tp + " << p.tp << "*(dp + " << p.dp
     << "*pp), tp fastest so a TP group stays inside a node; "
     << cluster.gpusPerNode << " GPUs per node, " << nodes << " node"
     << (nodes > 1 ? "s" : "") << "\n";
  os << "  node 0 = ranks 0-" << firstNode - 1 << "\n";
  for (Axis axis : {Axis::TP, Axis::DP, Axis::PP}) {
    std::vector<std::vector<int64_t>> groups;
    std::set<int64_t> seen;
    for (int64_t r = 0; r < firstNode; ++r) {
      std::vector<int64_t> g = placement.group(axis, r);
      if (seen.insert(g.front()).second)
        groups.push_back(g);
    }
    os << "  " << name(axis) << " groups (size " << groups.front().size()
       << ") with ranks in node 0:";
    for (size_t i = 0; i < std::min<size_t>(groups.size(), 4); ++i)
      os << " " << groupText(groups[i]);
    if (groups.size() > 4)
      os << " (+" << groups.size() - 4 << " more)";
    os << "; " << (placement.crossesNodes(axis) ? "crosses nodes"
                                                 : "inside a node")
       << "\n";
  }
}

void printExplanation(llvm::raw_ostream &os, const ModelShape &model,
                      const PlanOptions &opts, const SearchResult &result) {
  const Candidate &best = result.fitting.front();
  const Plan &p = best.plan;
  const Cluster &cluster = opts.cluster;
  PlanCost cost = evaluatePlan(model, cluster, opts.work, p);
  const StageMemory &st = cost.stages[cost.peakStage];
  bool sp = opts.work.sequenceParallel && p.tp > 1;

  os << "chosen plan: " << loomFlags(p, opts) << "\n";
  os << "  why: the fastest predicted step of the " << result.fitting.size()
     << " plans that fit";
  if (result.fitting.size() > 1) {
    const Candidate &next = result.fitting[1];
    if (next.stepS > best.stepS)
      os << llvm::formatv("; the runner-up ({0}) is {1:f2}% slower",
                          shortPlan(next.plan),
                          100 * (next.stepS / best.stepS - 1));
    else
      os << llvm::formatv("; the runner-up ({0}) is as fast but sends "
                          "{1:f2} GB per GPU per step instead of {2:f2} GB",
                          shortPlan(next.plan),
                          (next.tpBytes + next.dpBytes + next.ppBytes) / kGB,
                          (best.tpBytes + best.dpBytes + best.ppBytes) / kGB);
  }
  if (result.fastest && result.fastest->peakBytes > cluster.memoryBytes)
    os << llvm::formatv("; the fastest plan ignoring memory ({0}, {1:f3} s) "
                        "needs {2} > {3}",
                        shortPlan(result.fastest->plan),
                        result.fastest->stepS,
                        gb(result.fastest->peakBytes),
                        gb(cluster.memoryBytes));
  os << "\n";

  // Memory.
  os << "  memory per GPU on stage " << cost.peakStage << " (the peak of "
     << p.pp << " stage" << (p.pp > 1 ? "s" : "") << "):\n";
  os << llvm::formatv("    params       {0} layers x {1}/tp {2}", st.layers,
                      model.paramsPerBlock, p.tp);
  if (cost.peakStage == 0)
    os << " + wte + wpe";
  if (cost.peakStage == p.pp - 1)
    os << (p.pp > 1 ? " + wte (tied) + ln_f" : " + ln_f");
  os << llvm::formatv(" = {0} per GPU\n", (int64_t)std::llround(st.paramsPerGpu));
  os << llvm::formatv("    model state  {0} (ZeRO-{1}, N = dp = {2}, {3}) = "
                      "{4:f2} x params = {5} bytes = {6}\n",
                      modelStateFormula(p.zero, cluster.precision), p.zero,
                      p.dp,
                      cluster.precision == Precision::BF16
                          ? "bf16 mixed precision"
                          : "fp32",
                      modelStateBytesPerParam(p.zero, p.dp, cluster.precision),
                      (int64_t)std::llround(st.modelStateBytes),
                      gb(st.modelStateBytes));
  os << llvm::formatv("    activations  {0} = {1} bytes per layer per "
                      "micro-batch (s={2} b={3} h={4} a={5} t={6}{7}{8})\n",
                      activationFormula(p.tp, opts.work.sequenceParallel,
                                        p.recompute),
                      (int64_t)std::llround(cost.activationBytesPerLayer),
                      opts.work.seq, (int64_t)cost.microbatchRows,
                      model.hidden, model.heads, p.tp,
                      sp ? ", sequence parallel" : "",
                      cluster.precision == Precision::FP32 ? ", x2 in fp32"
                                                           : "");
  os << llvm::formatv("                 x {0} layers x {1:f2} micro-batches "
                      "in flight{2} = {3}\n",
                      st.layers, microbatchesInFlight(p, cost.peakStage),
                      cost.peakStage == p.pp - 1
                          ? " + fp32 logits"
                          : "",
                      gb(st.activationBytes));
  if (st.gatheredBytes > 0)
    os << "    gathered     ZeRO-3: 3 blocks of parameters/gradients "
          "unsharded (current, prefetched, gradients) = "
       << gb(st.gatheredBytes) << "\n";
  os << "    workspace    " << gb(kWorkspaceBytes) << " + "
     << llvm::formatv("{0:f0}", 100 * kFragmentation)
     << "% fragmentation = " << gb(st.workspaceBytes) << "\n";
  os << "    peak         " << gb(cost.peakBytes) << " of "
     << gb(cluster.memoryBytes) << "\n";

  // Time.
  double micro = cost.microbatchComputeS + cost.microbatchTpS +
                 cost.microbatchZeroS + cost.microbatchP2pS;
  double slots = double(p.microbatches) +
                 double(p.pp - 1) / double(std::max<int64_t>(p.virtualStages, 1));
  os << "  time per step (slowest stage " << cost.slowestStage << "):\n";
  os << llvm::formatv("    micro-batch  compute {0:f2} ms (at {1:f1}% of "
                      "peak) + TP {2:f2} ms + ZeRO {3:f2} ms (exposed of "
                      "{6:f2} ms) + p2p {4:f2} ms = {5:f2} ms\n",
                      1e3 * cost.microbatchComputeS,
                      100 * cost.computeEfficiency, 1e3 * cost.microbatchTpS,
                      1e3 * cost.microbatchZeroS, 1e3 * cost.microbatchP2pS,
                      1e3 * micro, 1e3 * cost.microbatchZeroTotalS);
  os << llvm::formatv("    pipeline     x (m + (p-1)/v) = {0:f2} slots = "
                      "{1:f3} s, bubble {2:f2}%\n",
                      slots, micro * slots, 100 * cost.bubble);
  os << llvm::formatv("    dp           {0:f3} s exposed once per step; "
                      "{1:f3} s of DP traffic in all (ring over {2} rank{3}, "
                      "{4})\n",
                      cost.dpExposedS, cost.dpTotalS, p.dp,
                      p.dp > 1 ? "s" : "",
                      cost.dpCrossesNodes ? "crosses nodes" : "inside a node");
  if (p.pp > 1)
    os << llvm::formatv("    embedding    {0:f3} s (tied wte gradient "
                        "all-reduced between the first and last stage)\n",
                        cost.embeddingSyncS);
  os << llvm::formatv("    step         {0:f3} s; MFU = {1:e} model FLOPs / "
                      "({0:f3} s x {2} GPUs x {3:f0} TFLOP/s) = {4:f1}%\n",
                      cost.stepS, cost.modelFlops, cluster.gpus,
                      cluster.peakFlops / 1e12, 100 * cost.mfu);
}

void printJson(llvm::raw_ostream &os, const ModelShape &model,
               const PlanOptions &opts, const SearchResult &result,
               double importSeconds) {
  const Candidate &best = result.fitting.front();
  const Plan &p = best.plan;
  PlanCost cost = evaluatePlan(model, opts.cluster, opts.work, p);
  const StageMemory &st = cost.stages[cost.peakStage];
  auto round = [](double v) { return (int64_t)std::llround(v); };
  llvm::json::Object root{
      {"mesh", llvm::json::Object{{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}}},
      {"zero", p.zero},
      {"microbatches", p.microbatches},
      {"schedule", name(p.schedule)},
      {"virtual_stages", p.virtualStages},
      {"recompute", name(p.recompute)},
      {"sequence_parallel", p.tp > 1 && opts.work.sequenceParallel},
      {"precision", name(opts.cluster.precision)},
      {"predicted_peak_bytes_per_gpu", round(cost.peakBytes)},
      {"predicted_step_s", cost.stepS},
      {"predicted_mfu", cost.mfu},
      {"predicted_bubble", cost.bubble},
      {"traffic_bytes_per_gpu_per_step",
       llvm::json::Object{{"tp", round(cost.tpBytes)},
                          {"dp", round(cost.dpBytes)},
                          {"pp", round(cost.ppBytes)}}},
      {"crosses_nodes",
       llvm::json::Object{{"tp", cost.tpCrossesNodes},
                          {"dp", cost.dpCrossesNodes},
                          {"pp", cost.ppCrossesNodes}}},
      {"memory",
       llvm::json::Object{
           {"peak_stage", cost.peakStage},
           {"params_per_gpu", round(st.paramsPerGpu)},
           {"model_state_formula",
            modelStateFormula(p.zero, opts.cluster.precision)},
           {"model_state_bytes", round(st.modelStateBytes)},
           {"activation_formula",
            activationFormula(p.tp, opts.work.sequenceParallel, p.recompute)},
           {"activation_bytes_per_layer", round(cost.activationBytesPerLayer)},
           {"activation_bytes", round(st.activationBytes)},
           {"gathered_bytes", round(st.gatheredBytes)},
           {"workspace_bytes", round(st.workspaceBytes)},
           {"stages",
            [&] {
              llvm::json::Array a;
              for (size_t i = 0; i < cost.stages.size(); ++i) {
                const StageMemory &s = cost.stages[i];
                a.push_back(llvm::json::Object{
                    {"layers", s.layers},
                    {"params_per_gpu", round(s.paramsPerGpu)},
                    {"microbatches_in_flight", microbatchesInFlight(p, i)},
                    {"model_state_bytes", round(s.modelStateBytes)},
                    {"activation_bytes", round(s.activationBytes)},
                    {"gathered_bytes", round(s.gatheredBytes)},
                    {"workspace_bytes", round(s.workspaceBytes)},
                    {"peak_bytes", round(s.peakBytes())}});
              }
              return a;
            }()}}},
      {"rejected_families",
       [&] {
         llvm::json::Array a;
         for (const auto &[key, family] : result.families)
           if (!family.fits && family.smallest)
             a.push_back(llvm::json::Object{
                 {"zero", key.first},
                 {"tp", key.second},
                 {"plans", family.evaluated},
                 {"smallest_peak_bytes", round(family.smallest->peakBytes)},
                 {"smallest_plan", shortPlan(family.smallest->plan)}});
         return a;
       }()},
      {"loom_flags", loomFlags(p, opts)},
      {"model", llvm::json::Object{{"params", model.params},
                                   {"params_per_block", model.paramsPerBlock},
                                   {"layers", model.layers}}},
      {"search", llvm::json::Object{{"plans", result.evaluated},
                                    {"fitting", (int64_t)result.fitting.size()},
                                    {"seconds", result.seconds},
                                    {"import_seconds", importSeconds}}},
  };
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
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
  SearchResult result = search(*model, *opts);
  if (result.evaluated == 0) {
    std::string why = "no valid plan for --gpus " +
                      std::to_string(opts->cluster.gpus);
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
      Plan plan{*dp, *tp, *pp,
                (int)opts->zero.value_or(0), opts->microbatches.value_or(1),
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
    const Candidate &c = *result.smallest;
    std::string message = llvm::formatv(
        "no plan fits in {0} per GPU: the smallest predicted peak is {1} "
        "({2}: {3}); give --gpu-mem-gb {4:f1} or more, or more --gpus",
        gb(opts->cluster.memoryBytes), gb(c.peakBytes), shortPlan(c.plan),
        memoryBreakdown(c), std::ceil(c.peakBytes / kGB * 10) / 10);
    fail(message);
    printRejected(llvm::errs(), result, *opts);
    return 1;
  }

  // 4. Report.
  if (opts->json) {
    printJson(llvm::outs(), *model, *opts, result, importSeconds);
    return 0;
  }
  llvm::raw_ostream &os = llvm::outs();
  const Cluster &cluster = opts->cluster;
  int64_t nodes =
      (cluster.gpus + cluster.gpusPerNode - 1) / cluster.gpusPerNode;
  os << llvm::formatv("loom plan: {0}: n_layer={1} n_head={2} n_embd={3} "
                      "vocab_size={4}; Phi = {5} ({6} per block)\n",
                      opts->config, model->layers, model->heads,
                      model->hidden, model->vocab, model->params,
                      model->paramsPerBlock);
  os << llvm::formatv("  cluster: {0} GPU{9} = {1} node{2} x {3}, {4} each, "
                      "{5:f0} TFLOP/s peak ({6}), intra-node {7:f0} GB/s, "
                      "inter-node {8:f0} GB/s\n",
                      cluster.gpus, nodes, nodes > 1 ? "s" : "",
                      std::min(cluster.gpus, cluster.gpusPerNode),
                      gb(cluster.memoryBytes), cluster.peakFlops / 1e12,
                      name(cluster.precision),
                      cluster.intraNodeBandwidth / 1e9,
                      cluster.interNodeBandwidth / 1e9,
                      cluster.gpus > 1 ? "s" : "");
  double tokens = double(opts->work.batch) * double(opts->work.seq);
  os << llvm::formatv("  step: batch {0} x seq {1} = {2} tokens, {3:e} model "
                      "FLOPs (6N + 6LCT per token)\n",
                      opts->work.batch, opts->work.seq, (int64_t)tokens,
                      modelFlopsPerToken(*model, opts->work.seq) * tokens);
  os << llvm::formatv("search: {0} plans in {1:f1} ms (model import {2:f1} "
                      "ms); {3} fit in {4} per GPU\n\n",
                      result.evaluated, 1e3 * result.seconds,
                      1e3 * importSeconds, result.fitting.size(),
                      gb(cluster.memoryBytes));
  os << "top " << std::min<int64_t>(opts->top, result.fitting.size())
     << " of " << result.fitting.size()
     << " plans that fit (predicted; peak and traffic per GPU per step):\n";
  printTable(os, result, opts->top);
  os << "\n";
  printFamilies(os, result);
  printRejected(os, result, *opts);
  os << "\n";
  printExplanation(os, *model, *opts, result);
  os << "\n";
  printPlacement(os, result.fitting.front().plan, cluster);
  return 0;
}
