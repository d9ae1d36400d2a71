//===- ModelSummary.cpp - Parameter and FLOP summary of a model -*- C++ -*-===//
//
// `--loom-summary`: what a user checks first about a model IR: is Φ what the
// paper says, how big is it, how much work is one step.
//
//===----------------------------------------------------------------------===//

#include "passes/Analysis/ModelSummary.h"
#include "passes/Passes.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMSUMMARY
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

static int64_t numElements(Type type) {
  return cast<RankedTensorType>(type).getNumElements();
}

static bool isParam(func::FuncOp func, unsigned argIndex) {
  auto role = func.getArgAttrOfType<RoleAttr>(argIndex, LoomDialect::kRoleAttr);
  return role && role.getValue() == Role::Param;
}

} // namespace

ModelFigures mlir::loom::measureModel(func::FuncOp func) {
  ModelFigures fig;
  fig.function = func.getSymName().str();
  fig.config = func->getAttrOfType<DictionaryAttr>(LoomDialect::kModelAttr);

  // 1. Parameters, split by whether a block owns them.
  llvm::DenseSet<Value> blockOwned;
  for (auto block : func.getBody().getOps<BlockOp>()) {
    int64_t count = 0;
    for (Value input : block.getInputs()) {
      auto arg = dyn_cast<BlockArgument>(input);
      if (arg && isParam(func, arg.getArgNumber()) &&
          blockOwned.insert(input).second)
        count += numElements(input.getType());
    }
    fig.perBlock.emplace_back(block.getLabel().str(), count);
    fig.paramsInBlocks += count;
    ++fig.numBlocks;
  }
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (isParam(func, i)) {
      fig.params += numElements(arg.getType());
      if (!blockOwned.contains(arg)) {
        auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
        fig.outsideBlocks.emplace_back(name ? name.str() : "?",
                                       numElements(arg.getType()));
      }
    }
    auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
    if (role && role.getValue() == Role::Input)
      fig.tokensPerStep = numElements(arg.getType());
  }

  // 2. Forward cost: top-level ops only, since a block sums its own body.
  for (Operation &op : func.getBody().front())
    if (auto cost = dyn_cast<CostOpInterface>(&op)) {
      fig.forwardFlops += cost.getFlops();
      fig.forwardBytes += cost.getBytesAccessed();
    }
  return fig;
}

namespace {

static std::string humanBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  std::string out;
  llvm::raw_string_ostream(out) << llvm::format("%.1f %s", bytes, units[unit]);
  return out;
}

static void printText(const ModelFigures &fig, raw_ostream &os) {
  os << "loom model summary: @" << fig.function << "\n";
  if (fig.config) {
    os << "  config:";
    for (NamedAttribute entry : fig.config) {
      os << " " << entry.getName().getValue() << "=";
      if (auto i = dyn_cast<IntegerAttr>(entry.getValue()))
        os << i.getValue();
      else if (auto f = dyn_cast<FloatAttr>(entry.getValue()))
        os << f.getValueAsDouble();
      else
        os << entry.getValue();
    }
    os << "\n";
  }
  os << "  parameters: " << fig.params << " ("
     << humanBytes(4.0 * fig.params) << " in fp32)\n";
  for (const auto &[name, count] : fig.outsideBlocks)
    os << "    " << name << ": " << count << "\n";
  if (fig.numBlocks) {
    os << "    blocks: " << fig.numBlocks << " holding " << fig.paramsInBlocks;
    bool uniform = llvm::all_of(fig.perBlock, [&](const auto &b) {
      return b.second == fig.perBlock.front().second;
    });
    if (uniform)
      os << " (" << fig.perBlock.front().second << " each)";
    os << "\n";
  }
  os << "  tokens per step: " << fig.tokensPerStep << "\n";
  os << "  forward flops per step: " << fig.forwardFlops << "\n";
  if (fig.tokensPerStep) {
    double perToken = double(fig.forwardFlops) / fig.tokensPerStep;
    os << "  forward flops per token: " << llvm::format("%.4g", perToken)
       << " (2*params = " << 2 * fig.params << ")\n";
    os << "  train flops per step (3x forward): "
       << 3 * fig.forwardFlops << "\n";
  }
  os << "  forward bytes accessed per step: " << fig.forwardBytes << " ("
     << humanBytes(fig.forwardBytes) << ")\n";
}

static void printJson(const ModelFigures &fig, raw_ostream &os) {
  llvm::json::Object config;
  if (fig.config)
    for (NamedAttribute entry : fig.config) {
      if (auto i = dyn_cast<IntegerAttr>(entry.getValue()))
        config[entry.getName().getValue()] = i.getInt();
      else if (auto f = dyn_cast<FloatAttr>(entry.getValue()))
        config[entry.getName().getValue()] = f.getValueAsDouble();
    }
  llvm::json::Array blocks;
  for (const auto &[label, count] : fig.perBlock)
    blocks.push_back(llvm::json::Object{{"label", label}, {"params", count}});
  llvm::json::Object outside;
  for (const auto &[name, count] : fig.outsideBlocks)
    outside[name] = count;
  llvm::json::Object root{
      {"function", fig.function},
      {"config", std::move(config)},
      {"params", fig.params},
      {"params_in_blocks", fig.paramsInBlocks},
      {"params_outside_blocks", std::move(outside)},
      {"blocks", std::move(blocks)},
      {"tokens_per_step", fig.tokensPerStep},
      {"forward_flops", fig.forwardFlops},
      {"forward_bytes", fig.forwardBytes},
  };
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

struct LoomSummaryPass : mlir::loom::impl::LoomSummaryBase<LoomSummaryPass> {
  using Base::Base;

  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp func) {
      if (!func->hasAttr(LoomDialect::kModelAttr) || func.isExternal())
        return;
      ModelFigures fig = measureModel(func);
      if (json)
        printJson(fig, llvm::outs());
      else
        printText(fig, llvm::outs());
    });
    markAllAnalysesPreserved();
  }
};

} // namespace
