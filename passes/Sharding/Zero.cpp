//===- Zero.cpp - Data-parallel and ZeRO shardings on dp -------*- C++ -*-===//
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

struct LoomZeroPass : mlir::loom::impl::LoomZeroBase<LoomZeroPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (stage < 0 || stage > 3) {
      module.emitError() << "loom-zero: stage must be 0, 1, 2 or 3, got "
                         << static_cast<int64_t>(stage);
      return signalPassFailure();
    }
    if (stage != 0) {
      module.emitError()
          << "loom-zero: stage " << static_cast<int64_t>(stage)
          << " (sharding optimizer state, gradients or parameters over "
          << axis << ") is not implemented yet; use stage 0 (DDP)";
      return signalPassFailure();
    }
    SmallVector<MeshOp> meshes(module.getOps<MeshOp>());
    if (meshes.size() != 1) {
      module.emitError() << "loom-zero: needs exactly one loom.mesh, found "
                         << meshes.size();
      return signalPassFailure();
    }
    MeshOp mesh = meshes.front();
    if (!mesh.getShape().findAxis(axis)) {
      mesh.emitOpError() << "has no axis '" << axis
                         << "' for data parallelism (axes: "
                         << mesh.getShape().axisNamesForDiagnostic() << ")";
      return signalPassFailure();
    }

    // Token ids and targets are split by rows: each dp rank takes its rows
    // of the global batch.
    Builder b(module.getContext());
    for (auto func : module.getOps<func::FuncOp>()) {
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
        func.setArgAttr(i, LoomDialect::kShardingAttr, sharding);
      }
    }
  }
};

} // namespace
