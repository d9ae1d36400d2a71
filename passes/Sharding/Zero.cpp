//===- Zero.cpp - Data-parallel and ZeRO shardings on dp --------*- C++ -*-===//
//
// `--loom-zero`: ZeRO is shardings on the dp axis, not a code path. This
// pass only seeds them; propagation and the partitioner do the rest.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMZERO
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// `loom.sharding` of a function's arguments, set in one go: setArgAttr
/// rebuilds the whole argument attribute list each call, quadratic in the
/// argument count (thousands in a deep model's training step).
class ArgShardings {
public:
  explicit ArgShardings(func::FuncOp func) : func(func) {
    func.getAllArgAttrs(attrs);
  }
  void set(unsigned i, ShardingAttr sharding) {
    NamedAttrList list(attrs[i]);
    list.set(LoomDialect::kShardingAttr, sharding);
    attrs[i] = list.getDictionary(func.getContext());
    changed = true;
  }
  void apply() {
    if (changed)
      func.setAllArgAttrs(attrs);
  }

private:
  func::FuncOp func;
  SmallVector<DictionaryAttr> attrs;
  bool changed = false;
};

struct LoomZeroPass : mlir::loom::impl::LoomZeroBase<LoomZeroPass> {
  using Base::Base;

  /// ZeRO's stages as shardings of the model state on the axis (stage 0:
  /// all of it whole, DDP), each on the
  /// first dimension the axis divides (wte's vocabulary rows rarely divide;
  /// its width does), the same dimension for a parameter, its gradient and
  /// its moments so the shards line up. Stage 1 splits the AdamW moments:
  /// each rank updates its shard (a local slice of the replicated
  /// parameter and gradient, no traffic) and the updated shards are
  /// all-gathered. Stage 2 also splits the gradient accumulators: each
  /// micro-batch's partial gradients are reduce-scattered into them, never
  /// fully resident. Stage 3 also splits the parameters: the partitioner
  /// gathers each where it is used (inside a block's forward, again inside
  /// its backward) and the gathered copy dies with its last use. State no
  /// dimension of which the axis divides stays whole on every rank. State
  /// already split by another axis (tensor parallelism) keeps that split and
  /// takes dp on another dimension, or stays whole over dp when none is
  /// left (a column-parallel bias).
  LogicalResult seedOptimizerState(func::FuncOp func, MeshOp mesh) {
    Builder b(func.getContext());
    int64_t n = mesh.getShape().getAxisSizes()[*mesh.getShape().findAxis(axis)];
    ArgShardings shardings(func);
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!role || !type)
        continue;
      Role r = role.getValue();
      if (r != Role::Param && r != Role::Grad && r != Role::AdamM &&
          r != Role::AdamV && r != Role::Master)
        continue;
      // Mixed precision's fp32 master weights are optimizer state: split
      // with the moments (the ZeRO paper's 12 bytes per parameter).
      bool split =
          ((r == Role::AdamM || r == Role::AdamV || r == Role::Master) &&
           stage >= 1) ||
          (r == Role::Grad && stage >= 2) || (r == Role::Param && stage >= 3);
      // A sharding seeded before (tensor parallelism) is kept; dp takes a
      // dimension no other axis splits.
      auto seeded = func.getArgAttrOfType<ShardingAttr>(
          i, LoomDialect::kShardingAttr);
      SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
      if (seeded)
        dims.assign(seeded.getDims().begin(), seeded.getDims().end());
      std::optional<unsigned> splitDim;
      if (split)
        for (unsigned d = 0; d < type.getRank() && !splitDim; ++d)
          if (type.getShape()[d] % n == 0 &&
              cast<ArrayAttr>(dims[d]).empty())
            splitDim = d;
      if (splitDim)
        dims[*splitDim] = b.getArrayAttr({b.getStringAttr(axis)});
      else if (seeded)
        continue;
      shardings.set(i, ShardingAttr::get(func.getContext(),
                                         FlatSymbolRefAttr::get(
                                             mesh.getSymNameAttr()),
                                         b.getArrayAttr(dims),
                                         b.getArrayAttr({})));
    }
    shardings.apply();
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (stage < 0 || stage > 3) {
      module.emitError() << "loom-zero: stage must be 0, 1, 2 or 3, got "
                         << static_cast<int64_t>(stage);
      return signalPassFailure();
    }
    SmallVector<MeshOp> meshes(module.getOps<MeshOp>());
    if (meshes.size() != 1) {
      module.emitError() << "loom-zero: needs exactly one loom.mesh, found "
                         << meshes.size();
      return signalPassFailure();
    }
    MeshOp mesh = meshes.front();
    std::optional<unsigned> index = mesh.getShape().findAxis(axis);
    if (!index) {
      mesh.emitOpError() << "has no axis '" << axis
                         << "' for data parallelism (axes: "
                         << mesh.getShape().axisNamesForDiagnostic() << ")";
      return signalPassFailure();
    }
    if (mesh.getShape().getAxisSizes()[*index] == 1)
      return; // one data-parallel rank: nothing to split

    // Token ids and targets are split by rows: each dp rank takes its rows
    // of the global batch.
    Builder b(module.getContext());
    for (auto func : module.getOps<func::FuncOp>()) {
      ArgShardings shardings(func);
      for (BlockArgument arg : func.getArguments()) {
        unsigned i = arg.getArgNumber();
        auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
        if (!role ||
            (role.getValue() != Role::Input && role.getValue() != Role::Target))
          continue;
        auto type = cast<RankedTensorType>(arg.getType());
        SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
        dims[0] = b.getArrayAttr({b.getStringAttr(axis)});
        auto sharding = ShardingAttr::get(
            module.getContext(), FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
            b.getArrayAttr(dims), b.getArrayAttr({}));
        if (failed(verifyShardingForType(sharding, type, mesh, [&]() {
              return func.emitOpError()
                     << "cannot split the rows of argument #" << i << " over "
                     << axis << ": ";
            })))
          return signalPassFailure();
        shardings.set(i, sharding);
      }
      shardings.apply();
      // Stage 0 (DDP) seeds the model state whole on dp, as stage 1 seeds
      // the parameters and gradients: a hand-written sharding that splits
      // an activation's channels over dp must not split a replicated
      // parameter through propagation (its gradient accumulator, which no
      // op reads in the micro-batch, would stay whole and not match).
      if (failed(seedOptimizerState(func, mesh)))
        return signalPassFailure();
    }
  }
};

} // namespace
