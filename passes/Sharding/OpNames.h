//===- OpNames.h - How collectives' reasons name ops ------------*- C++ -*-===//
//
// The partitioner and the communication scheduler both write `reason`
// strings that name the op a value comes from or goes to; they name it the
// same way.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_OPNAMES_H
#define LOOM_PASSES_SHARDING_OPNAMES_H

#include "dialects/Loom/IR/LoomOps.h"

#include <string>

namespace mlir::loom {

/// "h.0.mlp.c_fc" for ops with a NameLoc, a block's label ("h.3.grad"),
/// else the op name.
inline std::string describeOp(Operation *op) {
  if (auto named = dyn_cast<NameLoc>(op->getLoc()))
    return named.getName().str();
  if (auto block = dyn_cast<BlockOp>(op))
    return block.getLabel().str();
  return op->getName().getStringRef().str();
}

} // namespace mlir::loom

#endif // LOOM_PASSES_SHARDING_OPNAMES_H
