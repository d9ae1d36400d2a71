//===- OpShapes.h - Shape helpers for op verifiers and costs ---*- C++ -*-===//
//
// Internal to dialects/Loom/IR: the small queries every verifier and cost
// function needs on statically shaped tensor values.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_LOOM_IR_OPSHAPES_H
#define LOOM_DIALECTS_LOOM_IR_OPSHAPES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/STLExtras.h"

#include <string>

namespace mlir::loom {

/// A shape as `[4, 64, 768]`, for diagnostics.
inline std::string shapeStr(ArrayRef<int64_t> dims) {
  std::string out = "[";
  for (auto [i, d] : llvm::enumerate(dims))
    out += (i ? ", " : "") + std::to_string(d);
  return out + "]";
}

inline ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}
inline std::string shapeRef(Value v) { return shapeStr(shapeOf(v)); }
inline Type elementTypeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}
inline int64_t numElements(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}
/// Bytes of a tensor value (sub-byte types round up to a byte per element).
inline int64_t bytesOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t bits = type.getElementTypeBitWidth();
  return type.getNumElements() * std::max<int64_t>(1, (bits + 7) / 8);
}

/// All float operands and results of `op` share one element type.
inline LogicalResult verifySameFloatElementType(Operation *op) {
  Type expected;
  auto check = [&](Value v) -> LogicalResult {
    Type elt = elementTypeOf(v);
    if (!isa<FloatType>(elt))
      return success();
    if (!expected)
      expected = elt;
    else if (elt != expected)
      return op->emitOpError() << "mixes element types " << expected
                               << " and " << elt
                               << "; cast explicitly before combining";
    return success();
  };
  for (Value v : op->getOperands())
    if (failed(check(v)))
      return failure();
  for (Value v : op->getResults())
    if (failed(check(v)))
      return failure();
  return success();
}

} // namespace mlir::loom

#endif // LOOM_DIALECTS_LOOM_IR_OPSHAPES_H
