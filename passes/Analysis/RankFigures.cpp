//===- RankFigures.cpp - What one rank holds and sends per step -*- C++ -*-===//
//
// Counts with the runtime's conventions, so that predictions and
// measurements are equal, not close: model state is the bytes of the
// parameter, gradient and AdamW-moment buffers a rank holds (local shapes);
// collectives are ring-counted as the communicator counts what it sends.
//
//===----------------------------------------------------------------------===//

#include "passes/Analysis/RankFigures.h"

#include "dialects/Loom/IR/OpShapes.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <set>

using namespace mlir;
using namespace mlir::loom;

std::pair<const char *, int64_t>
mlir::loom::collectiveSentBytes(Operation *op) {
  auto group = [&](auto c) { return c.getGroupSize().value_or(1); };
  auto ring = [](int64_t factor, int64_t full, int64_t n) -> int64_t {
    return n <= 1 ? 0 : factor * (n - 1) * full / n;
  };
  // A bucket travels as one buffer: one ring over its members' total.
  auto total = [](ValueRange values) {
    int64_t bytes = 0;
    for (Value v : values)
      bytes += bytesOf(v.getType());
    return bytes;
  };
  if (auto c = dyn_cast<AllReduceOp>(op))
    return {"all_reduce", ring(2, total(c.getInputs()), group(c))};
  if (auto c = dyn_cast<GroupAllReduceOp>(op))
    return {"all_reduce",
            ring(2, bytesOf(c.getInput().getType()), group(c))};
  if (auto c = dyn_cast<AllGatherOp>(op))
    return {"all_gather", ring(1, total(c.getResults()), group(c))};
  if (auto c = dyn_cast<ReduceScatterOp>(op))
    return {"reduce_scatter", ring(1, total(c.getInputs()), group(c))};
  if (auto c = dyn_cast<AllToAllOp>(op))
    return {"all_to_all", ring(1, bytesOf(c.getInput().getType()), group(c))};
  if (auto c = dyn_cast<SendOp>(op))
    return {"send", bytesOf(c.getInput().getType())};
  return {nullptr, 0};
}

namespace {

int64_t sum(const std::map<std::string, int64_t> &m) {
  int64_t t = 0;
  for (const auto &[key, value] : m)
    t += value;
  return t;
}

} // namespace

int64_t RankFigures::modelStateBytes() const { return sum(stateBytes); }
int64_t RankFigures::totalSentBytes() const { return sum(sentBytes); }

int64_t RankFigures::gradElementBytes() const {
  auto elements = stateElements.find("grad");
  if (elements == stateElements.end() || elements->second == 0)
    return 0;
  return stateBytes.at("grad") / elements->second;
}

int64_t RankFigures::mixedPrecisionStateBytes() const {
  auto elements = [&](const char *role) -> int64_t {
    auto it = stateElements.find(role);
    return it == stateElements.end() ? 0 : it->second;
  };
  return 2 * elements("param") + 2 * elements("grad") +
         4 * elements("adam_m") /* fp32 master */ + 4 * elements("adam_m") +
         4 * elements("adam_v");
}

RankFigures mlir::loom::measureRankFigures(ArrayRef<func::FuncOp> funcs,
                                           MeshOp mesh) {
  RankFigures fig;
  if (mesh) {
    fig.ranks = mesh.getShape().getNumDevices();
    llvm::raw_string_ostream os(fig.mesh);
    for (auto [i, name] : llvm::enumerate(mesh.getShape().getAxisNames()))
      os << (i ? " " : "") << name.getValue() << "="
         << mesh.getShape().getAxisSizes()[i];
  }
  for (const char *kind : kCollectiveKinds) {
    fig.sentBytes[kind] = 0;
    fig.calls[kind] = 0;
  }
  // 1. Model state: the micro-batch and update functions both take the
  //    parameters (and the update the gradients); count each once.
  std::set<std::string> seen;
  for (func::FuncOp func : funcs) {
    if (func.isExternal())
      continue;
    if (auto arena =
            func->getAttrOfType<IntegerAttr>(LoomDialect::kArenaBytesAttr))
      fig.arenaBytes = std::max(fig.arenaBytes, arena.getInt());
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
      auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
      if (!role || !name)
        continue;
      Role r = role.getValue();
      if (r != Role::Param && r != Role::Grad && r != Role::AdamM &&
          r != Role::AdamV && r != Role::Master)
        continue;
      std::string key = (stringifyRole(r) + ":" + name.getValue()).str();
      if (!seen.insert(key).second)
        continue;
      fig.stateBytes[stringifyRole(r).str()] += bytesOf(arg.getType());
      int64_t elements =
          cast<RankedTensorType>(arg.getType()).getNumElements();
      fig.stateElements[stringifyRole(r).str()] += elements;
      if (r == Role::Param) {
        fig.params += elements;
        // The argument is local after partitioning; its sharding (global
        // layout) says how many ways each dimension was split.
        int64_t ways = 1;
        if (auto sharding = func.getArgAttrOfType<ShardingAttr>(
                i, LoomDialect::kShardingAttr);
            sharding && mesh && func->hasAttr(LoomDialect::kPartitionedAttr))
          for (unsigned d = 0; d < sharding.getRank(); ++d)
            for (StringRef axis : sharding.getDimAxes(d))
              if (auto a = mesh.getShape().findAxis(axis))
                ways *= mesh.getShape().getAxisSizes()[*a];
        fig.globalParams += elements * ways;
      }
    }

    // 2. Collectives, once per execution of their function.
    int64_t executions = 1;
    std::string phaseName = "step";
    if (auto train =
            func->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr)) {
      if (auto m = train.getAs<IntegerAttr>("microbatches"))
        executions = m.getInt();
      if (auto phase = train.getAs<StringAttr>("phase"))
        phaseName = phase.str();
    }
    fig.phases[phaseName].executions = executions;
    func.walk([&](Operation *op) {
      auto [kind, bytes] = collectiveSentBytes(op);
      if (!kind)
        return;
      // A reduction of the last micro-batch alone (DDP's no_sync, ZeRO-1's
      // in-place reduce-scatter) runs once per step, whatever the
      // micro-batch count.
      const bool lastOnly = isLastMicrobatchReduction(op);
      const int64_t times = lastOnly ? 1 : executions;
      RankFigures::PhaseTraffic &phase =
          fig.phases[lastOnly ? "last microbatch" : phaseName];
      phase.executions = times;
      fig.sentBytes[kind] += bytes * times;
      fig.calls[kind] += times;
      if (auto block = op->getParentOfType<BlockOp>()) {
        std::string label = block.getLabel().str();
        if (!fig.blockSentBytes.count(label))
          fig.blockLabels.push_back(label);
        fig.blockSentBytes[label][kind] += bytes * times;
        fig.blockCalls[label][kind] += times;
      }
      std::string key = std::string(kind) + "[";
      if (auto axes = op->getAttrOfType<ArrayAttr>("axes"))
        for (auto [i, axis] : llvm::enumerate(axes.getAsValueRange<StringAttr>()))
          key += (i ? "," : "") + axis.str();
      phase.bytesPerExecution[key + "]"] += bytes;
    });
  }
  return fig;
}

RankFigures mlir::loom::measureRankFigures(ModuleOp module) {
  SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
  auto meshes = module.getOps<MeshOp>();
  MeshOp mesh = meshes.empty() ? MeshOp() : *meshes.begin();
  return measureRankFigures(funcs, mesh);
}
