//===- LoomTrainingOps.cpp - Verifiers and costs of backward/optimizer ops ===//
//
// Backward ops mirror their forward op's shape rules; costs count the work of
// the straightforward kernel, including the recomputation the attention and
// layer-norm gradients do instead of keeping forward state alive.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/IR/OpShapes.h"

#include <cmath>

using namespace mlir;
using namespace mlir::loom;

/// `value` must have shape `expected`; `what` names it in the diagnostic.
static LogicalResult expectShape(Operation *op, StringRef what, Value value,
                                 ArrayRef<int64_t> expected) {
  if (shapeOf(value) == expected)
    return success();
  return op->emitOpError() << what << " has shape " << shapeRef(value)
                           << " but should be " << shapeStr(expected);
}

static int64_t sumBytes(Operation *op) {
  int64_t total = 0;
  for (Value v : op->getOperands())
    total += bytesOf(v);
  for (Value v : op->getResults())
    total += bytesOf(v);
  return total;
}

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingGradOp::verify() {
  ArrayRef<int64_t> table = shapeOf(getResult());
  if (table.size() != 2)
    return emitOpError() << "result must be [vocab, width], got "
                         << shapeRef(getResult());
  SmallVector<int64_t> expected(shapeOf(getIds()));
  expected.push_back(table[1]);
  if (failed(expectShape(*this, "dout", getDout(), expected)))
    return failure();
  return verifySameFloatElementType(*this);
}
int64_t EmbeddingGradOp::getFlops() { return numElements(getDout()); }
int64_t EmbeddingGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult ReduceLeadingOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  if (out.size() > in.size() || in.take_back(out.size()) != out)
    return emitOpError() << "result shape " << shapeRef(getResult())
                         << " must equal the trailing dimensions of the "
                            "input shape "
                         << shapeRef(getInput());
  return verifySameFloatElementType(*this);
}
int64_t ReduceLeadingOp::getFlops() { return numElements(getInput()); }
int64_t ReduceLeadingOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult LinearGradOp::verify() {
  ArrayRef<int64_t> w = shapeOf(getWeight()), in = shapeOf(getInput());
  if (w.size() < 2 || in.empty() || in.back() != w[0])
    return emitOpError() << "input " << shapeRef(getInput())
                         << " and weight " << shapeRef(getWeight())
                         << " do not form a linear layer [..., K] x [K, N...]";
  SmallVector<int64_t> out(in.drop_back());
  llvm::append_range(out, w.drop_front());
  if (failed(expectShape(*this, "dout", getDout(), out)) ||
      failed(expectShape(*this, "input gradient", getInputGrad(), in)) ||
      failed(expectShape(*this, "weight gradient", getWeightGrad(), w)))
    return failure();
  if (Value db = getBiasGrad())
    if (failed(expectShape(*this, "bias gradient", db, w.drop_front())))
      return failure();
  return verifySameFloatElementType(*this);
}
int64_t LinearGradOp::getFlops() {
  ArrayRef<int64_t> w = shapeOf(getWeight());
  int64_t rows = numElements(getInput()) / std::max<int64_t>(1, w[0]);
  int64_t cols = 1;
  for (int64_t d : w.drop_front())
    cols *= d;
  // dinput and dweight are each a GEMM of the forward's size.
  return 4 * rows * w[0] * cols + (getBiasGrad() ? rows * cols : 0);
}
int64_t LinearGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult MatmulGradOp::verify() {
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  if (lhs.size() < 2 || rhs.size() != 2)
    return emitOpError() << "lhs " << shapeRef(getLhs()) << " and rhs "
                         << shapeRef(getRhs()) << " are not a matrix product";
  int64_t k = getTransposeRhs() ? rhs[1] : rhs[0];
  int64_t n = getTransposeRhs() ? rhs[0] : rhs[1];
  if (lhs.back() != k)
    return emitOpError() << "contracting dimensions differ: lhs has "
                         << lhs.back() << ", rhs has " << k;
  SmallVector<int64_t> out(lhs.drop_back());
  out.push_back(n);
  if (failed(expectShape(*this, "dout", getDout(), out)) ||
      failed(expectShape(*this, "lhs gradient", getLhsGrad(), lhs)) ||
      failed(expectShape(*this, "rhs gradient", getRhsGrad(), rhs)))
    return failure();
  return verifySameFloatElementType(*this);
}
int64_t MatmulGradOp::getFlops() {
  return 4 * shapeOf(getLhs()).back() * numElements(getDout());
}
int64_t MatmulGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult LayerNormGradOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  if (in.empty())
    return emitOpError() << "input must have rank >= 1";
  SmallVector<int64_t> c{in.back()};
  if (failed(expectShape(*this, "dout", getDout(), in)) ||
      failed(expectShape(*this, "weight", getWeight(), c)) ||
      failed(expectShape(*this, "input gradient", getInputGrad(), in)) ||
      failed(expectShape(*this, "weight gradient", getWeightGrad(), c)) ||
      failed(expectShape(*this, "bias gradient", getBiasGrad(), c)))
    return failure();
  double eps = getEpsilon().convertToDouble();
  if (!(eps > 0.0 && eps < 1.0))
    return emitOpError() << "epsilon must be in (0, 1), got " << eps;
  return verifySameFloatElementType(*this);
}
// Statistics recomputed (3 per element) plus the gradient itself (~10).
int64_t LayerNormGradOp::getFlops() { return 13 * numElements(getInput()); }
int64_t LayerNormGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult GeluGradOp::verify() { return success(); }
int64_t GeluGradOp::getFlops() { return 16 * numElements(getInput()); }
int64_t GeluGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult AttentionGradOp::verify() {
  ArrayRef<int64_t> qkv = shapeOf(getQkv());
  FailureOr<int64_t> channels = verifyQkv(*this, getQkv(), getNumHeads());
  if (failed(channels))
    return failure();
  if (failed(expectShape(*this, "dout", getDout(),
                         {qkv[0], qkv[1], *channels})) ||
      failed(expectShape(*this, "result", getResult(), qkv)))
    return failure();
  // The parser and the builders take both saved operands or neither.
  if (Value out = getOut()) {
    if (failed(expectShape(*this, "saved out", out,
                           {qkv[0], qkv[1], *channels})) ||
        failed(
            expectShape(*this, "saved lse", getLse(),
                        {qkv[0], static_cast<int64_t>(getNumHeads()), qkv[1]})))
      return failure();
  } else if (getLse()) {
    return emitOpError() << "has a saved lse without the forward's output; "
                            "pass both (saved %out, %lse) or neither";
  }
  return verifySameFloatElementType(*this, getLse());
}
int64_t AttentionGradOp::getFlops() {
  ArrayRef<int64_t> qkv = shapeOf(getQkv());
  int64_t heads = getNumHeads(), headSize = *qkvChannels(qkv) / heads;
  int64_t pairs = qkv[1] * (qkv[1] + 1) / 2;
  // Recompute q·k and the probabilities (2·hs + 6), then dv, dp, dq, dk
  // (4 × 2·hs) and the softmax backward (3) per causal pair; without the
  // saved forward, the whole forward first (loom.attention: 4·hs + 6).
  int64_t perPair = 10 * headSize + 9;
  if (!getOut())
    perPair += 4 * headSize + 6;
  return qkv[0] * heads * pairs * perPair;
}
int64_t AttentionGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult SoftmaxGradOp::verify() {
  if (shapeOf(getOutput()).empty())
    return emitOpError() << "input must have rank >= 1";
  return success();
}
int64_t SoftmaxGradOp::getFlops() { return 4 * numElements(getOutput()); }
int64_t SoftmaxGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult CrossEntropyGradOp::verify() {
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  if (logits.size() < 2 || logits.drop_back() != shapeOf(getTargets()))
    return emitOpError() << "targets " << shapeRef(getTargets())
                         << " do not match logits " << shapeRef(getLogits())
                         << " without the vocab dimension";
  if (failed(expectShape(*this, "result", getResult(), logits)))
    return failure();
  if (auto n = getNumTokens();
      n && static_cast<int64_t>(*n) < numElements(getTargets()))
    return emitOpError() << "num_tokens " << *n
                         << " is less than this rank's "
                         << numElements(getTargets()) << " tokens";
  if (failed(verifyVocabSize(*this, getVocabSize(), getLogits(),
                             /*splitColumns=*/false)))
    return failure();
  return verifySameFloatElementType(*this);
}
Value CrossEntropyGradOp::getPaddedResult() { return getResult(); }
int64_t CrossEntropyGradOp::getFlops() { return 6 * numElements(getLogits()); }
int64_t CrossEntropyGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult CrossEntropySumsGradOp::verify() {
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  if (logits.size() < 2)
    return emitOpError() << "logits must be [..., vocab], got "
                         << shapeRef(getLogits());
  ArrayRef<int64_t> tokens = logits.drop_back();
  for (auto [what, v] :
       {std::pair<StringRef, Value>{"row_max", getRowMax()},
        {"sum_exp", getSumExp()},
        {"targets", getTargets()}})
    if (failed(expectShape(*this, what, v, tokens)))
      return failure();
  if (failed(expectShape(*this, "result", getResult(), logits)))
    return failure();
  if (failed(verifyVocabSize(*this, getVocabSize(), getLogits(),
                             getVocabAxesAttr() != nullptr)))
    return failure();
  if (auto n = getNumTokens();
      n && static_cast<int64_t>(*n) < numElements(getTargets()))
    return emitOpError() << "num_tokens " << *n
                         << " is less than this rank's "
                         << numElements(getTargets()) << " tokens";
  return verifyLogitsAndStatistics(*this, {getLogits(), getResult()},
                                   {getRowMax(), getSumExp()});
}
Value CrossEntropySumsGradOp::getPaddedResult() { return getResult(); }
int64_t CrossEntropySumsGradOp::getFlops() {
  return 4 * numElements(getLogits());
}
int64_t CrossEntropySumsGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult SliceGradOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getDout()), out = shapeOf(getResult());
  int64_t dim = getDim(), offset = getOffset();
  if (in.size() != out.size() || dim < 0 ||
      dim >= static_cast<int64_t>(in.size()))
    return emitOpError() << "dim " << dim << " does not fit dout "
                         << shapeRef(getDout()) << " and result "
                         << shapeRef(getResult());
  if (offset < 0 || in[dim] > out[dim] || offset > out[dim] - in[dim])
    return emitOpError() << "slice at offset " << offset << " of size "
                         << in[dim] << " does not fit dimension " << dim
                         << " of size " << out[dim];
  for (size_t i = 0; i < in.size(); ++i)
    if (static_cast<int64_t>(i) != dim && in[i] != out[i])
      return emitOpError() << "dout " << shapeRef(getDout())
                           << " and result " << shapeRef(getResult())
                           << " differ outside dimension " << dim;
  return verifySameFloatElementType(*this);
}
int64_t SliceGradOp::getFlops() { return 0; }
int64_t SliceGradOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult FillOp::verify() { return success(); }
int64_t FillOp::getFlops() { return 0; }
int64_t FillOp::getBytesAccessed() { return bytesOf(getResult()); }

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

LogicalResult SumSquaresOp::verify() {
  // The element and result types are ODS constraints; the count is not.
  if (getInputs().empty())
    return emitOpError() << "needs at least one operand to sum the squares of";
  return success();
}
// A multiply and an add per element.
int64_t SumSquaresOp::getFlops() {
  int64_t total = 0;
  for (Value g : getInputs())
    total += 2 * numElements(g);
  return total;
}
int64_t SumSquaresOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult ClipCoefOp::verify() {
  double maxNorm = getMaxNorm().convertToDouble();
  if (!std::isfinite(maxNorm))
    return emitOpError() << "max_norm must be finite (<= 0 disables "
                            "clipping), got "
                         << maxNorm;
  return success();
}
// sqrt, add, divide and min on one scalar.
int64_t ClipCoefOp::getFlops() { return 4; }
int64_t ClipCoefOp::getBytesAccessed() { return sumBytes(*this); }

LogicalResult AdamWOp::verify() {
  double b1 = getBeta1().convertToDouble(), b2 = getBeta2().convertToDouble();
  double eps = getEps().convertToDouble();
  double wd = getWeightDecay().convertToDouble();
  if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0))
    return emitOpError() << "betas must be in [0, 1), got (" << b1 << ", "
                         << b2 << ")";
  if (!(eps > 0.0))
    return emitOpError() << "eps must be positive, got " << eps;
  if (!(wd >= 0.0))
    return emitOpError() << "weight_decay must be >= 0, got " << wd;
  if (failed(expectShape(*this, "grad", getGrad(), shapeOf(getParam()))))
    return failure();
  // The gradient is the parameter's type, or bf16 next to f32 master
  // weights (mixed precision): never wider than what it updates.
  Type param = elementTypeOf(getParam()), grad = elementTypeOf(getGrad());
  if (grad != param && !(param.isF32() && grad.isBF16()))
    return emitOpError() << "grad element type " << grad
                         << " does not fit parameter element type " << param
                         << "; it must be the parameter's, or bf16 for f32 "
                            "master weights (mixed precision)";
  return success();
}
// Per element: decay (2), both moments (5), bias corrections, sqrt, divide
// and update (~7).
int64_t AdamWOp::getFlops() { return 14 * numElements(getParam()); }
int64_t AdamWOp::getBytesAccessed() {
  // Read param, grad, m, v; write param, m, v.
  return 6 * bytesOf(getParam()) + bytesOf(getGrad());
}
