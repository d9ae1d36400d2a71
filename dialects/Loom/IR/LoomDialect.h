//===- LoomDialect.h - The loom dialect, its enums and attributes -*- C++ -*-===//
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

#include "dialects/Loom/IR/LoomDialect.h.inc"
#include "dialects/Loom/IR/LoomEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Loom/IR/LoomAttrs.h.inc"

#endif // LOOM_DIALECTS_LOOM_IR_LOOMDIALECT_H
