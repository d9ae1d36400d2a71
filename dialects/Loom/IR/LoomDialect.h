//===- LoomDialect.h - The loom dialect, its enums and attrs ----*- C++ -*-===//
//
// Include this to use the dialect and its attributes; LoomOps.h for the ops.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_LOOM_IR_LOOMDIALECT_H
#define LOOM_DIALECTS_LOOM_IR_LOOMDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"

#include "dialects/Loom/IR/LoomDialect.h.inc"
#include "dialects/Loom/IR/LoomEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Loom/IR/LoomAttrs.h.inc"

namespace mlir::loom {
/// Parses a list of mesh axis names, `[dp, tp]` (bare identifiers or
/// strings), as StringAttrs: the syntax shardings and collectives share.
ParseResult parseAxisList(AsmParser &parser, SmallVectorImpl<Attribute> &axes);
/// Prints `[dp, tp]` for an ArrayAttr of StringAttr axis names.
void printAxisList(AsmPrinter &printer, ArrayAttr axes);
/// The `loom.checkpoint_shape` of argument `arg` of `func` (an array of
/// integers; verified by the dialect), or std::nullopt when it has none.
std::optional<SmallVector<int64_t>> getCheckpointShape(func::FuncOp func,
                                                       unsigned arg);
} // namespace mlir::loom

#endif // LOOM_DIALECTS_LOOM_IR_LOOMDIALECT_H
