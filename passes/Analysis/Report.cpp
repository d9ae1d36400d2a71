//===- Report.cpp - Per-rank memory and traffic before launch --*- C++ -*-===//
//
// `--loom-report`: the numbers a user checks before spending GPU hours —
// model state, peak memory and bytes sent per step — read off the
// partitioned IR with the same conventions the runtime counts with.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <set>

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMREPORT
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

constexpr const char *kKinds[] = {"all_reduce", "all_gather", "reduce_scatter",
                                  "all_to_all", "send"};

int64_t bytesOf(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.getNumElements() *
         std::max<int64_t>(1, (tensor.getElementTypeBitWidth() + 7) / 8);
}

/// What one rank holds and sends.
struct RankFigures {
  std::map<std::string, int64_t> stateBytes; // by role
  int64_t params = 0;                        // local parameter elements
  int64_t arenaBytes = -1;
  std::map<std::string, int64_t> sentBytes; // by collective kind, per step
  std::map<std::string, int64_t> calls;
  int64_t ranks = 1;
  std::string mesh;
};

/// Bytes one rank sends for one execution of `op`, ring-counted with S the
/// full buffer, and the collective's kind.
std::pair<const char *, int64_t> ringBytes(Operation *op) {
  auto group = [&](auto c) { return c.getGroupSize().value_or(1); };
  auto ring = [](int64_t factor, int64_t full, int64_t n) -> int64_t {
    return n <= 1 ? 0 : factor * (n - 1) * full / n;
  };
  if (auto c = dyn_cast<AllReduceOp>(op)) {
    // A bucket travels as one buffer: one ring over the members' total.
    int64_t total = 0;
    for (Value input : c.getInputs())
      total += bytesOf(input.getType());
    return {"all_reduce", ring(2, total, group(c))};
  }
  if (auto c = dyn_cast<AllGatherOp>(op))
    return {"all_gather", ring(1, bytesOf(c.getResult().getType()), group(c))};
  if (auto c = dyn_cast<ReduceScatterOp>(op))
    return {"reduce_scatter",
            ring(1, bytesOf(c.getInput().getType()), group(c))};
  if (auto c = dyn_cast<AllToAllOp>(op))
    return {"all_to_all", ring(1, bytesOf(c.getInput().getType()), group(c))};
  if (auto c = dyn_cast<SendOp>(op))
    return {"send", bytesOf(c.getInput().getType())};
  return {nullptr, 0};
}

RankFigures measure(ModuleOp module) {
  RankFigures fig;
  for (auto mesh : module.getOps<MeshOp>()) {
    fig.ranks = mesh.getShape().getNumDevices();
    llvm::raw_string_ostream os(fig.mesh);
    for (auto [i, name] : llvm::enumerate(mesh.getShape().getAxisNames()))
      os << (i ? " " : "") << name.getValue() << "="
         << mesh.getShape().getAxisSizes()[i];
  }
  for (const char *kind : kKinds) {
    fig.sentBytes[kind] = 0;
    fig.calls[kind] = 0;
  }
  std::set<std::string> seen; // model state counted once per (role, name)
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    int64_t executions = 1;
    if (auto train = func->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr))
      if (auto m = train.getAs<IntegerAttr>("microbatches"))
        executions = m.getInt();
    if (auto arena = func->getAttrOfType<IntegerAttr>(LoomDialect::kArenaBytesAttr))
      fig.arenaBytes = std::max(fig.arenaBytes, arena.getInt());
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
      auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
      if (!role || !name)
        continue;
      Role r = role.getValue();
      if (r != Role::Param && r != Role::Grad && r != Role::AdamM &&
          r != Role::AdamV)
        continue;
      std::string key = (stringifyRole(r) + ":" + name.getValue()).str();
      if (!seen.insert(key).second)
        continue;
      fig.stateBytes[stringifyRole(r).str()] += bytesOf(arg.getType());
      if (r == Role::Param)
        fig.params += cast<RankedTensorType>(arg.getType()).getNumElements();
    }
    func.walk([&](Operation *op) {
      auto [kind, bytes] = ringBytes(op);
      if (!kind)
        return;
      fig.sentBytes[kind] += bytes * executions;
      fig.calls[kind] += executions;
    });
  }
  return fig;
}

int64_t total(const std::map<std::string, int64_t> &m) {
  int64_t t = 0;
  for (const auto &[k, v] : m)
    t += v;
  return t;
}

void printText(const RankFigures &fig, raw_ostream &os) {
  os << "loom report: " << (fig.mesh.empty() ? "single rank" : fig.mesh)
     << " (" << fig.ranks << " rank" << (fig.ranks == 1 ? "" : "s")
     << "), per rank:\n";
  int64_t state = total(fig.stateBytes);
  os << "  model state: " << state << " bytes";
  if (fig.params)
    os << llvm::formatv(" ({0:F2} bytes per local parameter)",
                        double(state) / double(fig.params));
  os << "\n";
  for (const char *role : {"param", "grad", "adam_m", "adam_v"})
    if (auto it = fig.stateBytes.find(role); it != fig.stateBytes.end())
      os << "    " << role << ": " << it->second << "\n";
  if (fig.arenaBytes >= 0)
    os << "  predicted peak: " << fig.arenaBytes << " bytes (planned arena)\n";
  else
    os << "  predicted peak: not planned (run --loom-plan-buffers first)\n";
  os << "  sent per step: " << total(fig.sentBytes) << " bytes\n";
  for (const char *kind : kKinds)
    os << "    " << kind << ": " << fig.sentBytes.at(kind) << " bytes in "
       << fig.calls.at(kind) << " call" << (fig.calls.at(kind) == 1 ? "" : "s")
       << "\n";
}

void printJson(const RankFigures &fig, raw_ostream &os) {
  llvm::json::Object state, sent, calls;
  for (const auto &[role, bytes] : fig.stateBytes)
    state[role] = bytes;
  for (const auto &[kind, bytes] : fig.sentBytes)
    sent[kind] = bytes;
  for (const auto &[kind, n] : fig.calls)
    calls[kind] = n;
  llvm::json::Object root{
      {"ranks", fig.ranks},
      {"mesh", fig.mesh},
      {"model_state_bytes", total(fig.stateBytes)},
      {"model_state_by_role", std::move(state)},
      {"local_params", fig.params},
      {"predicted_peak_bytes", fig.arenaBytes},
      {"sent_bytes_per_step", std::move(sent)},
      {"collective_calls_per_step", std::move(calls)},
  };
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

struct LoomReportPass : mlir::loom::impl::LoomReportBase<LoomReportPass> {
  using Base::Base;

  void runOnOperation() override {
    RankFigures fig = measure(getOperation());
    if (json)
      printJson(fig, llvm::outs());
    else
      printText(fig, llvm::outs());
    markAllAnalysesPreserved();
  }
};

} // namespace
