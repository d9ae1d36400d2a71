//===- LoomOps.cpp - Verifiers and costs of the loom ops --------*- C++ -*-===//
//
// Every verifier names what is wrong with the shapes it was given and what
// was expected; costs follow the conventions in LoomInterfaces.td.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/IR/OpShapes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace mlir::loom;

#include "dialects/Loom/IR/LoomInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// EmbeddingOp
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  if (shapeOf(getTable()).size() != 2)
    return emitOpError() << "table must be [vocab, width], got "
                         << shapeRef(getTable());
  SmallVector<int64_t> expected(shapeOf(getIds()));
  expected.push_back(shapeOf(getTable())[1]);
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape " << shapeRef(getResult())
                         << " should be the ids shape " << shapeRef(getIds())
                         << " followed by the table width "
                         << shapeOf(getTable())[1];
  return verifySameFloatElementType(*this);
}

int64_t EmbeddingOp::getFlops() { return 0; }
int64_t EmbeddingOp::getBytesAccessed() {
  // Read the ids and one table row per id, write the result.
  return bytesOf(getIds()) + 2 * bytesOf(getResult());
}

//===----------------------------------------------------------------------===//
// AddOp
//===----------------------------------------------------------------------===//

LogicalResult AddOp::verify() {
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  if (rhs.size() > lhs.size() || lhs.take_back(rhs.size()) != rhs)
    return emitOpError() << "rhs shape " << shapeRef(getRhs())
                         << " must equal the trailing dimensions of the lhs "
                         << "shape " << shapeRef(getLhs());
  return verifySameFloatElementType(*this);
}

int64_t AddOp::getFlops() { return numElements(getResult()); }
int64_t AddOp::getBytesAccessed() {
  return bytesOf(getLhs()) + bytesOf(getRhs()) + bytesOf(getResult());
}

//===----------------------------------------------------------------------===//
// LinearOp
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), w = shapeOf(getWeight());
  if (in.empty())
    return emitOpError() << "input must have rank >= 1";
  if (w.size() < 2)
    return emitOpError() << "weight must be [in, out...], got "
                         << shapeRef(getWeight());
  if (in.back() != w[0])
    return emitOpError() << "input features " << in.back()
                         << " do not match the weight's input dimension "
                         << w[0] << " (weight is [in, out] as in HF Conv1D)";
  ArrayRef<int64_t> out = w.drop_front();
  if (Value bias = getBias())
    if (shapeOf(bias) != out)
      return emitOpError() << "bias shape " << shapeRef(bias)
                           << " should be " << shapeStr(out);
  SmallVector<int64_t> expected(in.drop_back());
  llvm::append_range(expected, out);
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape " << shapeRef(getResult())
                         << " should be " << shapeStr(expected);
  return verifySameFloatElementType(*this);
}

int64_t LinearOp::getFlops() {
  ArrayRef<int64_t> w = shapeOf(getWeight());
  // Rows are the input's leading dimensions (not elements / w[0]: w[0] may be
  // 0 in a zero-sized tensor); columns are every output dimension.
  int64_t rows = 1, cols = 1;
  for (int64_t d : shapeOf(getInput()).drop_back())
    rows *= d;
  for (int64_t d : w.drop_front())
    cols *= d;
  return 2 * rows * w[0] * cols + (getBias() ? rows * cols : 0);
}
int64_t LinearOp::getBytesAccessed() {
  return bytesOf(getInput()) + bytesOf(getWeight()) +
         (getBias() ? bytesOf(getBias()) : 0) + bytesOf(getResult());
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::verify() {
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  if (lhs.size() < 2)
    return emitOpError() << "lhs must be [..., M, K], got " << shapeRef(getLhs());
  if (rhs.size() != 2)
    return emitOpError() << "rhs must be a matrix, got " << shapeRef(getRhs());
  int64_t k = getTransposeRhs() ? rhs[1] : rhs[0];
  int64_t n = getTransposeRhs() ? rhs[0] : rhs[1];
  if (lhs.back() != k)
    return emitOpError() << "contracting dimensions differ: lhs "
                         << shapeRef(getLhs()) << " has K = " << lhs.back()
                         << ", rhs " << shapeRef(getRhs()) << " has K = " << k
                         << (getTransposeRhs() ? " (rhs transposed)" : "");
  SmallVector<int64_t> expected(lhs.drop_back());
  expected.push_back(n);
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape " << shapeRef(getResult())
                         << " should be " << shapeStr(expected);
  return verifySameFloatElementType(*this);
}

int64_t MatmulOp::getFlops() {
  int64_t k = shapeOf(getLhs()).back();
  return 2 * k * numElements(getResult());
}
int64_t MatmulOp::getBytesAccessed() {
  return bytesOf(getLhs()) + bytesOf(getRhs()) + bytesOf(getResult());
}

//===----------------------------------------------------------------------===//
// LayerNormOp
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  if (in.empty())
    return emitOpError() << "input must have rank >= 1";
  for (Value v : {getWeight(), getBias()})
    if (shapeOf(v) != ArrayRef<int64_t>{in.back()})
      return emitOpError() << "weight and bias must be [" << in.back()
                           << "] (the normalized dimension), got "
                           << shapeRef(v);
  double eps = getEpsilon().convertToDouble();
  if (!(eps > 0.0 && eps < 1.0))
    return emitOpError() << "epsilon must be in (0, 1), got " << eps;
  return verifySameFloatElementType(*this);
}

// Per element: accumulate mean (1), subtract mean (1), square and
// accumulate variance (2), normalize (1), scale (1), shift (1).
int64_t LayerNormOp::getFlops() { return 7 * numElements(getInput()); }
int64_t LayerNormOp::getBytesAccessed() {
  return bytesOf(getInput()) + bytesOf(getWeight()) + bytesOf(getBias()) +
         bytesOf(getResult());
}

//===----------------------------------------------------------------------===//
// GeluOp, SoftmaxOp
//===----------------------------------------------------------------------===//

LogicalResult GeluOp::verify() { return success(); }
// Per element: x³ (2), ·0.044715 and +x (2), ·sqrt(2/π) (1), tanh (1),
// +1 (1), ·0.5·x (2).
int64_t GeluOp::getFlops() { return 9 * numElements(getInput()); }
int64_t GeluOp::getBytesAccessed() {
  return bytesOf(getInput()) + bytesOf(getResult());
}

LogicalResult SoftmaxOp::verify() {
  if (shapeOf(getInput()).empty())
    return emitOpError() << "input must have rank >= 1";
  return success();
}
// Per element: running max (1), subtract (1), exp (1), sum (1), divide (1).
int64_t SoftmaxOp::getFlops() { return 5 * numElements(getInput()); }
int64_t SoftmaxOp::getBytesAccessed() {
  return bytesOf(getInput()) + bytesOf(getResult());
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  ArrayRef<int64_t> qkv = shapeOf(getQkv());
  FailureOr<int64_t> channels = verifyQkv(*this, getQkv(), getNumHeads());
  if (failed(channels))
    return failure();
  SmallVector<int64_t> expected{qkv[0], qkv[1], *channels};
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape " << shapeRef(getResult())
                         << " should be " << shapeStr(expected);
  if (Value lse = getLse()) {
    SmallVector<int64_t> rows{qkv[0], static_cast<int64_t>(getNumHeads()),
                              qkv[1]};
    if (shapeOf(lse) != ArrayRef<int64_t>(rows))
      return emitOpError() << "lse shape " << shapeRef(lse) << " should be "
                           << shapeStr(rows) << " ([B, num_heads, T])";
  }
  return verifySameFloatElementType(*this, getLse());
}

int64_t AttentionOp::getFlops() {
  ArrayRef<int64_t> qkv = shapeOf(getQkv());
  int64_t batch = qkv[0], seq = qkv[1], channels = *qkvChannels(qkv);
  int64_t heads = getNumHeads(), headSize = channels / heads;
  // Causal: query i sees keys 0..i, T(T+1)/2 pairs per head. Each pair costs
  // a q·k dot product and a p·v accumulation (2·hs each) plus the softmax
  // (scale, max, subtract, exp, sum, divide: 6).
  int64_t pairs = seq * (seq + 1) / 2;
  return batch * heads * pairs * (4 * headSize + 6);
}
int64_t AttentionOp::getBytesAccessed() {
  return bytesOf(getQkv()) + bytesOf(getResult()) +
         (getLse() ? bytesOf(getLse()) : 0);
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyOp::verify() {
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  if (logits.size() < 2)
    return emitOpError() << "logits must be [..., vocab], got "
                         << shapeRef(getLogits());
  if (logits.drop_back() != shapeOf(getTargets()))
    return emitOpError() << "targets shape " << shapeRef(getTargets())
                         << " should be the logits shape without the vocab "
                         << "dimension " << shapeStr(logits.drop_back());
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

// Softmax (5 per logit) plus the log-likelihood and the mean per token.
int64_t CrossEntropyOp::getFlops() {
  return 5 * numElements(getLogits()) + 2 * numElements(getTargets());
}
int64_t CrossEntropyOp::getBytesAccessed() {
  return bytesOf(getLogits()) + bytesOf(getTargets()) + bytesOf(getResult());
}

//===----------------------------------------------------------------------===//
// Vocab-parallel loss
//===----------------------------------------------------------------------===//

/// Every value in `values` has the per-token shape `tokens`.
static LogicalResult verifyPerToken(Operation *op, ArrayRef<int64_t> tokens,
                                    ArrayRef<std::pair<StringRef, Value>> values) {
  for (auto [what, v] : values)
    if (shapeOf(v) != tokens)
      return op->emitOpError() << what << " shape " << shapeRef(v)
                               << " should be the per-token shape "
                               << shapeStr(tokens);
  return success();
}

LogicalResult RowMaxOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  if (in.empty())
    return emitOpError() << "input must have rank >= 1";
  if (failed(verifyPerToken(*this, in.drop_back(), {{"result", getResult()}})))
    return failure();
  if (failed(verifyVocabSize(*this, getVocabSize(), getInput(),
                             getVocabAxesAttr() != nullptr)))
    return failure();
  return verifyLogitsAndStatistics(*this, {getInput()}, {getResult()});
}
Value RowMaxOp::getMaskedLogits() { return getInput(); }
int64_t RowMaxOp::getFlops() { return numElements(getInput()); }
int64_t RowMaxOp::getBytesAccessed() {
  return bytesOf(getInput()) + bytesOf(getResult());
}

LogicalResult CrossEntropySumsOp::verify() {
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  if (logits.size() < 2)
    return emitOpError() << "logits must be [..., vocab], got "
                         << shapeRef(getLogits());
  if (failed(verifyPerToken(*this, logits.drop_back(),
                            {{"row_max", getRowMax()},
                             {"targets", getTargets()},
                             {"sum_exp", getSumExp()},
                             {"target_logit", getTargetLogit()}})))
    return failure();
  if (failed(verifyVocabSize(*this, getVocabSize(), getLogits(),
                             getVocabAxesAttr() != nullptr)))
    return failure();
  return verifyLogitsAndStatistics(
      *this, {getLogits()}, {getRowMax(), getSumExp(), getTargetLogit()});
}
// exp and add per logit; one read per token for the target.
int64_t CrossEntropySumsOp::getFlops() { return 3 * numElements(getLogits()); }
int64_t CrossEntropySumsOp::getBytesAccessed() {
  return bytesOf(getLogits()) + bytesOf(getRowMax()) + bytesOf(getTargets()) +
         bytesOf(getSumExp()) + bytesOf(getTargetLogit());
}

LogicalResult CrossEntropyFromSumsOp::verify() {
  ArrayRef<int64_t> tokens = shapeOf(getRowMax());
  if (failed(verifyPerToken(*this, tokens,
                            {{"sum_exp", getSumExp()},
                             {"target_logit", getTargetLogit()}})))
    return failure();
  if (auto n = getNumTokens();
      n && static_cast<int64_t>(*n) < numElements(getRowMax()))
    return emitOpError() << "num_tokens " << *n
                         << " is less than this rank's "
                         << numElements(getRowMax()) << " tokens";
  return verifySameFloatElementType(*this);
}
int64_t CrossEntropyFromSumsOp::getFlops() {
  return 4 * numElements(getRowMax());
}
int64_t CrossEntropyFromSumsOp::getBytesAccessed() {
  return bytesOf(getRowMax()) + bytesOf(getSumExp()) +
         bytesOf(getTargetLogit()) + bytesOf(getResult());
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  if (numElements(getInput()) != numElements(getResult()))
    return emitOpError() << "cannot reshape " << shapeRef(getInput()) << " ("
                         << numElements(getInput()) << " elements) to "
                         << shapeRef(getResult()) << " ("
                         << numElements(getResult()) << " elements)";
  return verifySameFloatElementType(*this);
}
int64_t ReshapeOp::getFlops() { return 0; }
int64_t ReshapeOp::getBytesAccessed() { return 0; } // a view: nothing moves

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  ArrayRef<int64_t> perm = getPermutation();
  if (perm.size() != in.size())
    return emitOpError() << "permutation has " << perm.size()
                         << " entries but the input has rank " << in.size();
  SmallVector<bool> used(in.size(), false);
  SmallVector<int64_t> expected;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(in.size()) || used[p])
      return emitOpError() << "permutation " << shapeStr(perm)
                           << " is not a permutation of 0.." << in.size() - 1;
    used[p] = true;
    expected.push_back(in[p]);
  }
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape " << shapeRef(getResult())
                         << " should be " << shapeStr(expected);
  return verifySameFloatElementType(*this);
}
int64_t TransposeOp::getFlops() { return 0; }
int64_t TransposeOp::getBytesAccessed() {
  return bytesOf(getInput()) + bytesOf(getResult());
}

LogicalResult SliceOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  int64_t dim = getDim(), offset = getOffset();
  if (in.size() != out.size())
    return emitOpError() << "result rank " << out.size()
                         << " differs from input rank " << in.size();
  if (dim < 0 || dim >= static_cast<int64_t>(in.size()))
    return emitOpError() << "dim " << dim << " is out of range for rank "
                         << in.size();
  if (offset < 0 || offset > in[dim] - out[dim])
    return emitOpError() << "slice of " << out[dim] << " at offset " << offset
                         << " of dimension " << dim
                         << " is out of bounds for size " << in[dim];
  for (size_t i = 0; i < in.size(); ++i)
    if (static_cast<int64_t>(i) != dim && in[i] != out[i])
      return emitOpError() << "result dimension " << i << " is " << out[i]
                           << " but only dimension " << dim
                           << " may change (input " << shapeRef(getInput())
                           << ")";
  return verifySameFloatElementType(*this);
}
int64_t SliceOp::getFlops() { return 0; }
int64_t SliceOp::getBytesAccessed() { return 2 * bytesOf(getResult()); }

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one input";
  ArrayRef<int64_t> out = shapeOf(getResult());
  int64_t dim = getDim();
  if (dim < 0 || dim >= static_cast<int64_t>(out.size()))
    return emitOpError() << "dim " << dim << " is out of range for rank "
                         << out.size();
  int64_t total = 0;
  for (auto [i, input] : llvm::enumerate(getInputs())) {
    ArrayRef<int64_t> in = shapeOf(input);
    if (in.size() != out.size())
      return emitOpError() << "input #" << i << " has rank " << in.size()
                           << " but the result has rank " << out.size();
    for (size_t d = 0; d < in.size(); ++d)
      if (static_cast<int64_t>(d) != dim && in[d] != out[d])
        return emitOpError() << "input #" << i << " " << shapeRef(input)
                             << " differs from the result "
                             << shapeRef(getResult()) << " in dimension " << d;
    total += in[dim];
  }
  if (total != out[dim])
    return emitOpError() << "inputs add up to " << total << " along dim "
                         << dim << " but the result has " << out[dim];
  return verifySameFloatElementType(*this);
}
int64_t ConcatOp::getFlops() { return 0; }
int64_t ConcatOp::getBytesAccessed() { return 2 * bytesOf(getResult()); }

//===----------------------------------------------------------------------===//
// BlockOp
//===----------------------------------------------------------------------===//

YieldOp BlockOp::getYield() {
  return cast<YieldOp>(getBody().front().getTerminator());
}

LogicalResult BlockOp::verifyRegions() {
  Block &entry = getBody().front();
  if (entry.getNumArguments() != getInputs().size())
    return emitOpError() << "body has " << entry.getNumArguments()
                         << " arguments but the block has "
                         << getInputs().size() << " inputs";
  for (auto [i, pair] :
       llvm::enumerate(llvm::zip(entry.getArgumentTypes(), getInputs())))
    if (std::get<0>(pair) != std::get<1>(pair).getType())
      return emitOpError() << "body argument #" << i << " has type "
                           << std::get<0>(pair) << " but input #" << i
                           << " has type " << std::get<1>(pair).getType();
  auto yield = dyn_cast<YieldOp>(entry.getTerminator());
  if (!yield)
    return emitOpError() << "body must end with loom.yield";
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError() << "yields " << yield.getValues().size()
                         << " values of types " << yield.getValues().getTypes()
                         << " but the block returns " << getResultTypes();
  if (getLabel().empty())
    return emitOpError() << "needs a label such as \"h.0\"";
  return success();
}

int64_t BlockOp::getFlops() {
  int64_t total = 0;
  getBody().walk([&](CostOpInterface op) {
    if (op.getOperation() != getOperation())
      total += op.getFlops();
  });
  return total;
}
int64_t BlockOp::getBytesAccessed() {
  int64_t total = 0;
  getBody().walk([&](CostOpInterface op) {
    if (op.getOperation() != getOperation())
      total += op.getBytesAccessed();
  });
  return total;
}

//===----------------------------------------------------------------------===//
// CastOp
//===----------------------------------------------------------------------===//

LogicalResult CastOp::verify() {
  if (shapeOf(getInput()) != shapeOf(getResult()))
    return emitOpError() << "changes the shape from " << shapeRef(getInput())
                         << " to " << shapeRef(getResult())
                         << "; a cast keeps the shape (reshape separately)";
  Type from = elementTypeOf(getInput()), to = elementTypeOf(getResult());
  if (!((from.isF32() && to.isBF16()) || (from.isBF16() && to.isF32())))
    return emitOpError() << "casts " << from << " to " << to
                         << "; only f32 -> bf16 and bf16 -> f32 are supported";
  return success();
}
// One conversion per element.
int64_t CastOp::getFlops() { return numElements(getInput()); }
int64_t CastOp::getBytesAccessed() {
  return bytesOf(getInput()) + bytesOf(getResult());
}

//===----------------------------------------------------------------------===//
// AdamWOp assembly
//===----------------------------------------------------------------------===//

/// `tensor<f32>` after the parameter's type when the gradient has it, or
/// `tensor<768x3072xbf16>, tensor<f32>` when it differs (bf16 gradients of
/// f32 master weights): the common case keeps its short form.
static ParseResult parseAdamWGradAndScalarTypes(OpAsmParser &parser, Type &grad,
                                                Type &scalar, Type param) {
  Type first;
  if (parser.parseType(first))
    return failure();
  if (failed(parser.parseOptionalComma())) {
    grad = param;
    scalar = first;
    return success();
  }
  grad = first;
  return parser.parseType(scalar);
}

static void printAdamWGradAndScalarTypes(OpAsmPrinter &printer, Operation *,
                                         Type grad, Type scalar, Type param) {
  if (grad != param)
    printer << grad << ", ";
  printer << scalar;
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// `[dp, tp]` in the custom assembly of the collectives.
static ParseResult parseMeshAxes(OpAsmParser &parser, ArrayAttr &axes) {
  SmallVector<Attribute> names;
  if (parseAxisList(parser, names))
    return failure();
  axes = parser.getBuilder().getArrayAttr(names);
  return success();
}

static void printMeshAxes(OpAsmPrinter &printer, Operation *, ArrayAttr axes) {
  printAxisList(printer, axes);
}

/// `sum`, `max`, `min` or `avg` in the custom assembly of the reductions.
static ParseResult parseReduction(OpAsmParser &parser,
                                  ReductionKindAttr &reduction) {
  SMLoc loc = parser.getCurrentLocation();
  std::string name;
  if (parser.parseKeywordOrString(&name))
    return failure();
  std::optional<ReductionKind> kind = symbolizeReductionKind(name);
  if (!kind)
    return parser.emitError(loc, "unknown reduction '")
           << name << "' (expected sum, max, min or avg)";
  reduction = ReductionKindAttr::get(parser.getContext(), *kind);
  return success();
}

static void printReduction(OpAsmPrinter &printer, Operation *,
                           ReductionKindAttr reduction) {
  printer << stringifyReductionKind(reduction.getValue());
}

/// The split dimension of each member of an all_gather / reduce_scatter:
/// `dim d` when every member's is d (one value, or a bucket split alike),
/// `dims [d0, d1, ...]` (one per input) when a bucket's members differ.
static ParseResult
parseMemberDims(OpAsmParser &parser,
                ArrayRef<OpAsmParser::UnresolvedOperand> inputs,
                DenseI64ArrayAttr &dims) {
  SmallVector<int64_t> values;
  if (succeeded(parser.parseOptionalKeyword("dims"))) {
    SMLoc loc = parser.getCurrentLocation();
    if (parser.parseCommaSeparatedList(
            OpAsmParser::Delimiter::Square, [&]() -> ParseResult {
              return parser.parseInteger(values.emplace_back());
            }))
      return failure();
    if (values.size() != inputs.size())
      return parser.emitError(loc)
             << "dims lists " << values.size() << " dimensions for "
             << inputs.size() << " inputs; give one per input (or `dim d` "
                                 "for all)";
  } else {
    int64_t dim = 0;
    if (parser.parseKeyword("dim", "or 'dims [...]'") ||
        parser.parseInteger(dim))
      return failure();
    values.assign(inputs.size(), dim);
  }
  dims = parser.getBuilder().getDenseI64ArrayAttr(values);
  return success();
}

static void printMemberDims(OpAsmPrinter &printer, Operation *,
                            OperandRange, DenseI64ArrayAttr dims) {
  ArrayRef<int64_t> values = dims.asArrayRef();
  if (!values.empty() && llvm::all_equal(values)) {
    printer << "dim " << values.front();
    return;
  }
  printer << "dims [";
  llvm::interleaveComma(values, printer);
  printer << "]";
}

/// Resolves the mesh and checks the axes of a collective; returns the
/// group size (product of the axis sizes) or failure after a diagnostic.
static FailureOr<int64_t> verifyCollectiveAxes(Operation *op,
                                               SymbolTableCollection &symbols,
                                               FlatSymbolRefAttr meshRef,
                                               ArrayAttr axes) {
  auto meshOp = symbols.lookupNearestSymbolFrom<MeshOp>(op, meshRef);
  if (!meshOp)
    return op->emitOpError() << "refers to unknown mesh " << meshRef
                             << "; declare it with `loom.mesh`";
  if (axes.empty())
    return op->emitOpError() << "must name at least one mesh axis";
  MeshAttr mesh = meshOp.getShape();
  llvm::StringSet<> seen;
  int64_t groupSize = 1;
  for (Attribute attr : axes) {
    StringRef axis = cast<StringAttr>(attr).getValue();
    std::optional<unsigned> index = mesh.findAxis(axis);
    if (!index)
      return op->emitOpError()
             << "'" << axis << "' is not an axis of mesh @"
             << meshOp.getSymName() << " (axes: "
             << mesh.axisNamesForDiagnostic() << ")";
    if (!seen.insert(axis).second)
      return op->emitOpError() << "names mesh axis '" << axis << "' twice";
    groupSize *= mesh.getAxisSizes()[*index];
  }
  return groupSize;
}

template <typename OpT>
static std::optional<int64_t> groupSizeOf(OpT op) {
  MeshOp meshOp = lookupMesh(op, op.getMeshAttr());
  if (!meshOp)
    return std::nullopt;
  int64_t size = 1;
  for (Attribute attr : op.getAxes()) {
    std::optional<unsigned> index =
        meshOp.getShape().findAxis(cast<StringAttr>(attr).getValue());
    if (!index)
      return std::nullopt;
    size *= meshOp.getShape().getAxisSizes()[*index];
  }
  return size;
}

/// Checks `dim` is a dimension of `value`.
static LogicalResult verifyDimInRange(Operation *op, StringRef what,
                                      int64_t dim, Value value) {
  int64_t rank = shapeOf(value).size();
  if (dim < 0 || dim >= rank)
    return op->emitOpError() << what << " " << dim
                             << " is out of range for rank " << rank;
  return success();
}

/// Checks that `result` equals `input` except in `dim`, where it is `size`.
static LogicalResult verifyResizedDim(Operation *op, Value input, Value result,
                                      int64_t dim, int64_t size) {
  SmallVector<int64_t> expected(shapeOf(input));
  expected[dim] = size;
  if (shapeOf(result) != ArrayRef<int64_t>(expected))
    return op->emitOpError() << "result shape " << shapeRef(result)
                             << " should be " << shapeStr(expected);
  return success();
}

/// Ops that leave each group member one block of `dim` (reduce_scatter,
/// local_slice): the dimension divides by the group size (the block's
/// extent is returned) and the result has the block's size.
static FailureOr<int64_t> verifyBlockExtent(Operation *op,
                                            SymbolTableCollection &symbols,
                                            FlatSymbolRefAttr mesh,
                                            ArrayAttr axes, Value input,
                                            int64_t dim) {
  FailureOr<int64_t> n = verifyCollectiveAxes(op, symbols, mesh, axes);
  if (failed(n))
    return failure();
  int64_t extent = shapeOf(input)[dim];
  if (extent % *n != 0)
    return op->emitOpError() << "dimension " << dim << " of size " << extent
                             << " is not divisible by the group size " << *n;
  return extent / *n;
}
static LogicalResult verifySplitDim(Operation *op,
                                    SymbolTableCollection &symbols,
                                    FlatSymbolRefAttr mesh, ArrayAttr axes,
                                    Value input, Value result, int64_t dim) {
  FailureOr<int64_t> block =
      verifyBlockExtent(op, symbols, mesh, axes, input, dim);
  if (failed(block))
    return failure();
  return verifyResizedDim(op, input, result, dim, *block);
}

/// A `last_microbatch` reduction: only a micro-batch function (or a
/// pipeline chunk's backward) runs once per micro-batch; elsewhere "the
/// last micro-batch" means nothing.
static LogicalResult verifyInMicrobatchFunction(Operation *op) {
  Operation *func = op->getParentWithTrait<OpTrait::IsIsolatedFromAbove>();
  auto train =
      func ? func->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr)
           : DictionaryAttr();
  auto phase = train ? train.getAs<StringAttr>("phase") : StringAttr();
  if (!phase ||
      (phase.getValue() != "microbatch" && phase.getValue() != "backward"))
    return op->emitOpError()
           << "is last_microbatch outside a training step's micro-batch "
              "function or pipeline backward (loom.train phase "
              "\"microbatch\" or \"backward\"); reduce there, or drop "
              "last_microbatch";
  return success();
}

/// A collective of one value or a bucket: at least one input, one result
/// per input.
static LogicalResult verifyBucketCounts(Operation *op, StringRef verb) {
  if (op->getNumOperands() == 0)
    return op->emitOpError() << "needs at least one value to " << verb;
  if (op->getNumOperands() != op->getNumResults())
    return op->emitOpError()
           << "has " << op->getNumOperands() << " inputs but "
           << op->getNumResults() << " results; each input has its result";
  return success();
}

/// An all_gather / reduce_scatter names each member's split dimension (in
/// range for its input): one per input.
static LogicalResult verifyMemberDims(Operation *op, ArrayRef<int64_t> dims) {
  if (dims.size() != op->getNumOperands())
    return op->emitOpError()
           << "has " << dims.size() << " split dimensions for "
           << op->getNumOperands() << " inputs; give one per input";
  for (auto [i, input] : llvm::enumerate(op->getOperands()))
    if (failed(verifyDimInRange(op, "dim", dims[i], input)))
      return failure();
  return success();
}

bool mlir::loom::isLastMicrobatchReduction(Operation *op) {
  if (auto ar = dyn_cast<AllReduceOp>(op))
    return ar.getLastMicrobatch();
  if (auto rs = dyn_cast<ReduceScatterOp>(op))
    return rs.getLastMicrobatch();
  return false;
}

// all_reduce
LogicalResult AllReduceOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands,
    DictionaryAttr, OpaqueProperties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  // Each result has its input's type (a bucket keeps every member's shape).
  llvm::append_range(inferred, operands.getTypes());
  return success();
}
LogicalResult AllReduceOp::verify() {
  if (failed(verifyBucketCounts(*this, "reduce")))
    return failure();
  for (auto [i, input, result] : llvm::enumerate(getInputs(), getResults()))
    if (input.getType() != result.getType())
      return emitOpError() << "result #" << i << " has type "
                           << result.getType() << " but input #" << i
                           << " has type " << input.getType()
                           << "; a reduction keeps each value's type";
  if (getLastMicrobatch())
    return verifyInMicrobatchFunction(*this);
  return success();
}
LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyCollectiveAxes(*this, symbols, getMeshAttr(), getAxes());
}
std::optional<int64_t> AllReduceOp::getGroupSize() { return groupSizeOf(*this); }

// all_gather
LogicalResult AllGatherOp::verify() {
  if (failed(verifyBucketCounts(*this, "gather")) ||
      failed(verifyMemberDims(*this, getDims())))
    return failure();
  // A bucket is packed into one buffer: one element type for all members.
  return verifySameFloatElementType(*this);
}
LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> n =
      verifyCollectiveAxes(*this, symbols, getMeshAttr(), getAxes());
  if (failed(n))
    return failure();
  for (auto [input, result, dim] :
       llvm::zip(getInputs(), getResults(), getDims()))
    if (failed(verifyResizedDim(*this, input, result, dim,
                                shapeOf(input)[dim] * *n)))
      return failure();
  return success();
}
std::optional<int64_t> AllGatherOp::getGroupSize() { return groupSizeOf(*this); }

// local_slice
LogicalResult LocalSliceOp::verify() {
  if (failed(verifyDimInRange(*this, "dim", getDim(), getInput())))
    return failure();
  return verifySameFloatElementType(*this);
}
LogicalResult LocalSliceOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifySplitDim(*this, symbols, getMeshAttr(), getAxes(), getInput(),
                        getResult(), getDim());
}
std::optional<int64_t> LocalSliceOp::getGroupSize() {
  return groupSizeOf(*this);
}

// wait
LogicalResult WaitOp::verify() {
  if (getValues().empty())
    return emitOpError() << "waits for no value; name the values whose "
                            "collectives complete here";
  return success();
}

// reduce_scatter
LogicalResult ReduceScatterOp::verify() {
  if (failed(verifyBucketCounts(*this, "reduce-scatter")) ||
      failed(verifyMemberDims(*this, getDims())))
    return failure();
  // A bucket is packed into one buffer: one element type for all members.
  if (failed(verifySameFloatElementType(*this)))
    return failure();
  if (!getLastMicrobatch())
    return success();
  for (auto [i, input, result] :
       llvm::enumerate(getInputs(), getResults()))
    if (input.getType() != result.getType()) {
      InFlightDiagnostic diag =
          emitOpError() << "is last_microbatch, so it reduces in place and ";
      if (getInputs().size() == 1)
        diag << "its result has the input's type ";
      else
        diag << "result #" << i << " has input #" << i << "'s type ";
      return diag << input.getType() << ", not " << result.getType()
                  << "; read the block with local_slice";
    }
  return verifyInMicrobatchFunction(*this);
}
LogicalResult
ReduceScatterOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (!getLastMicrobatch()) {
    for (auto [input, result, dim] :
         llvm::zip(getInputs(), getResults(), getDims()))
      if (failed(verifySplitDim(*this, symbols, getMeshAttr(), getAxes(),
                                input, result, dim)))
        return failure();
    return success();
  }
  // In place: the blocks still divide each member's dimension.
  for (auto [input, dim] : llvm::zip(getInputs(), getDims()))
    if (failed(verifyBlockExtent(*this, symbols, getMeshAttr(), getAxes(),
                                 input, dim)))
      return failure();
  return success();
}
std::optional<int64_t> ReduceScatterOp::getGroupSize() {
  return groupSizeOf(*this);
}

// all_to_all
LogicalResult AllToAllOp::verify() {
  if (failed(verifyDimInRange(*this, "split dim", getSplitDim(), getInput())) ||
      failed(verifyDimInRange(*this, "concat dim", getConcatDim(), getInput())))
    return failure();
  return verifySameFloatElementType(*this);
}
LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<int64_t> n =
      verifyCollectiveAxes(*this, symbols, getMeshAttr(), getAxes());
  if (failed(n))
    return failure();
  int64_t split = getSplitDim(), concat = getConcatDim();
  SmallVector<int64_t> expected(shapeOf(getInput()));
  if (expected[split] % *n != 0)
    return emitOpError() << "split dimension " << split << " of size "
                         << expected[split]
                         << " is not divisible by the group size " << *n;
  expected[split] /= *n;
  expected[concat] *= *n;
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape " << shapeRef(getResult())
                         << " should be " << shapeStr(expected);
  return success();
}
std::optional<int64_t> AllToAllOp::getGroupSize() { return groupSizeOf(*this); }

// send / recv
/// Point-to-point ops name exactly one axis and a peer coordinate on it.
static LogicalResult verifyPeer(Operation *op, SymbolTableCollection &symbols,
                                FlatSymbolRefAttr meshRef, ArrayAttr axes,
                                int64_t peer, int64_t tag) {
  if (axes.size() != 1)
    return op->emitOpError() << "names " << axes.size()
                             << " mesh axes; point-to-point needs exactly one";
  FailureOr<int64_t> n = verifyCollectiveAxes(op, symbols, meshRef, axes);
  if (failed(n))
    return failure();
  if (peer < 0 || peer >= *n)
    return op->emitOpError() << "peer " << peer << " is outside axis '"
                             << cast<StringAttr>(axes[0]).getValue()
                             << "' of size " << *n;
  if (tag < 0)
    return op->emitOpError() << "tag must be non-negative, got " << tag;
  return success();
}

LogicalResult SendOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyPeer(*this, symbols, getMeshAttr(), getAxes(), getPeer(),
                    getTag());
}
std::optional<int64_t> SendOp::getGroupSize() { return groupSizeOf(*this); }

LogicalResult RecvOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyPeer(*this, symbols, getMeshAttr(), getAxes(), getPeer(),
                    getTag());
}
std::optional<int64_t> RecvOp::getGroupSize() { return groupSizeOf(*this); }

#define GET_OP_CLASSES
#include "dialects/Loom/IR/LoomOps.cpp.inc"
