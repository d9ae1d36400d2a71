//===- LoomDialect.cpp - Loom dialect registration --------------*- C++ -*-===//
//
// Registers the ops and attributes; the rest lives in LoomOps.cpp (ops) and
// LoomAttrs.cpp (attributes and the discardable-attribute checks).
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"

using namespace mlir;
using namespace mlir::loom;

#include "dialects/Loom/IR/LoomDialect.cpp.inc"
#include "dialects/Loom/IR/LoomEnums.cpp.inc"

void LoomDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "dialects/Loom/IR/LoomOps.cpp.inc"
      >();
}
