//===- OpShapes.h - Shape helpers for op verifiers and costs ----*- C++ -*-===//
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

#include <optional>
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
/// Bytes of a tensor type or value (sub-byte types round up to a byte per
/// element).
inline int64_t bytesOf(Type t) {
  auto type = cast<RankedTensorType>(t);
  int64_t bits = type.getElementTypeBitWidth();
  return type.getNumElements() * std::max<int64_t>(1, (bits + 7) / 8);
}
inline int64_t bytesOf(Value v) { return bytesOf(v.getType()); }

/// All float operands and results of `op` share one element type, except
/// f32 scalars: bf16 mixed precision keeps rank-0 values (a loss, its seed
/// gradient, the clip coefficient) f32 next to bf16 tensors. `ignored`
/// (may be null) is checked elsewhere: attention's f32 log-sum-exp.
inline LogicalResult verifySameFloatElementType(Operation *op,
                                                Value ignored = nullptr) {
  Type expected;
  auto check = [&](Value v) -> LogicalResult {
    Type elt = elementTypeOf(v);
    if (v == ignored || !isa<FloatType>(elt) ||
        (shapeOf(v).empty() && elt.isF32()))
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

/// The vocab-parallel loss ops: `logits` (and a logits gradient) share one
/// element type, and the per-token `statistics` (row maxima, sums of
/// exponentials, target logits) share that type or f32. bf16 mixed
/// precision keeps the statistics f32 next to bf16 logits, as Megatron
/// computes its vocab-parallel cross-entropy in fp32: a bf16 sum of
/// exponentials would cost the loss ~3 significant bits.
inline LogicalResult verifyLogitsAndStatistics(Operation *op,
                                               ArrayRef<Value> logits,
                                               ArrayRef<Value> statistics) {
  Type logitType = elementTypeOf(logits.front()), statType;
  for (Value v : logits)
    if (elementTypeOf(v) != logitType)
      return op->emitOpError() << "mixes element types " << logitType << " and "
                               << elementTypeOf(v)
                               << " in its logits; cast explicitly before "
                                  "combining";
  for (Value v : statistics) {
    Type elt = elementTypeOf(v);
    if (!statType)
      statType = elt;
    if (elt != statType || (elt != logitType && !elt.isF32()))
      return op->emitOpError()
             << "has per-token statistics of element type " << elt
             << " next to " << logitType
             << " logits; they must all be the logits' type or f32";
  }
  return success();
}

/// Channels C of an attention input: `[B, T, 3C]` (q|k|v packed along the
/// last dimension, as GPT-2's c_attn produces them) or `[B, T, 3, C]` (the
/// same bytes with q, k and v as a dimension, so heads are a plain split of
/// the last one); std::nullopt for any other shape.
inline std::optional<int64_t> qkvChannels(ArrayRef<int64_t> qkv) {
  if (qkv.size() == 3 && qkv[2] % 3 == 0)
    return qkv[2] / 3;
  if (qkv.size() == 4 && qkv[2] == 3)
    return qkv[3];
  return std::nullopt;
}

/// Verifies an attention input against `heads` and returns its channels.
inline FailureOr<int64_t> verifyQkv(Operation *op, Value qkv, int64_t heads) {
  std::optional<int64_t> channels = qkvChannels(shapeOf(qkv));
  if (!channels)
    return op->emitOpError()
           << "qkv must be [batch, seq, 3 * channels] or [batch, seq, 3, "
              "channels], got "
           << shapeRef(qkv);
  if (heads <= 0)
    return op->emitOpError() << "num_heads must be positive, got " << heads;
  if (*channels % heads != 0)
    return op->emitOpError() << "channels " << *channels
                             << " are not divisible by num_heads " << heads;
  return *channels;
}

/// Verifies the `vocab_size` of a loss op reading `logits`
/// (columns from global index `vocabSize` on are padding): at least one real
/// column, and, while the columns are whole (no `vocab_axes`), no more real
/// columns than there are.
inline LogicalResult verifyVocabSize(Operation *op,
                                     std::optional<int64_t> vocabSize,
                                     Value logits, bool splitColumns) {
  if (!vocabSize)
    return success();
  int64_t columns = shapeOf(logits).empty() ? 0 : shapeOf(logits).back();
  if (*vocabSize < 1 || (!splitColumns && *vocabSize > columns))
    return op->emitOpError()
           << "vocab_size = " << *vocabSize << " must be in [1, " << columns
           << "] (the logits' columns; from vocab_size on they are padding)";
  return success();
}

} // namespace mlir::loom

#endif // LOOM_DIALECTS_LOOM_IR_OPSHAPES_H
