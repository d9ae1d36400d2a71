//===- BlockActivations.cpp - Block activations and TP traffic --*- C++ -*-===//
//
// Korthikanti et al. 2022 count, per transformer block, the activations the
// backward needs (their Sec. 4.1, 16-bit values, 1-byte dropout masks):
//
//   attention  11sbh + 5as²b   (QKV input 2sbh; Q, K 4sbh; softmax output
//                               2as²b, its dropout mask as²b, the dropped
//                               probabilities 2as²b; V 2sbh; the output
//                               projection's input 2sbh; a mask sbh)
//   MLP        19sbh           (input 2sbh; GeLU input 8sbh; GeLU output
//                               8sbh; a mask sbh)
//   layer norms 4sbh           (two inputs)
//
// sbh(34 + 5as/h) in all. Tensor parallelism splits everything but the
// layer-norm inputs, the inputs of QKV and of the first MLP linear and the
// two masks (10sbh); sequence parallelism splits those too. With e-byte
// values the same count is sbh(16e + 2) + as²b(2e + 1).
//
// Loom's graph is read directly instead: the values a forward block yields
// to (or takes as input and passes to) its ".grad" block are what stays
// alive between the two.
//
//===----------------------------------------------------------------------===//

#include "passes/Analysis/BlockActivations.h"
#include "passes/Analysis/RankFigures.h"

#include "dialects/Loom/IR/OpShapes.h"
#include "passes/Sharding/OpNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::loom;

//===----------------------------------------------------------------------===//
// Formulas
//===----------------------------------------------------------------------===//

namespace {
double sbhOf(const BlockActivationFigures &f) {
  return double(f.s) * double(f.b) * double(f.h);
}
double as2bOf(const BlockActivationFigures &f) {
  return double(f.a) * double(f.s) * double(f.s) * double(f.b);
}
} // namespace

double BlockActivationFigures::paperNone(int e) const {
  return sbhOf(*this) * (16.0 * e + 2) + as2bOf(*this) * (2.0 * e + 1);
}

double BlockActivationFigures::paperTensorParallel(int e) const {
  return sbhOf(*this) * (4.0 * e + 2) + sbhOf(*this) * 12.0 * e / double(t) +
         as2bOf(*this) * (2.0 * e + 1) / double(t);
}

double BlockActivationFigures::paperSequenceParallel(int e) const {
  return paperNone(e) / double(t);
}

double BlockActivationFigures::paperSelective(int e) const {
  return sbhOf(*this) * (16.0 * e + 2) / double(t);
}

double BlockActivationFigures::expectedLoom() const {
  // The attention statistics are fp32 [b, a, s] over tp, whatever valueBytes.
  const double lse = 4.0 * double(s) * double(a) * double(b) / double(t);
  const double split = geluRecomputed ? 32.0 : 48.0;
  return sbhOf(*this) * (16.0 + split / double(t)) * double(valueBytes) / 4.0 +
         lse;
}

int64_t BlockActivationFigures::keptBytes() const {
  int64_t total = 0;
  for (const KeptActivation &k : kept)
    total += k.bytes;
  return total;
}

int64_t BlockActivationFigures::megatronSentBytes() const {
  if (t <= 1)
    return 0;
  int64_t bytes = valueBytes * allReduceElements();
  return 4 * (2 * (t - 1) * bytes / t);
}

//===----------------------------------------------------------------------===//
// Reading the IR
//===----------------------------------------------------------------------===//

namespace {

/// Adds the collectives on `axis` inside `block` to `allReduce` / `other`
/// (bytes as the report and the runtime count them: collectiveSentBytes).
void countCollectives(BlockOp block, StringRef axis,
                      BlockCollectives &allReduce, BlockCollectives &other) {
  auto onAxis = [&](ArrayAttr axes) {
    return llvm::any_of(axes.getAsValueRange<StringAttr>(),
                        [&](StringRef a) { return a == axis; });
  };
  block.walk([&](Operation *op) {
    int64_t elements = 0;
    BlockCollectives *into = nullptr;
    if (auto c = dyn_cast<AllReduceOp>(op)) {
      if (!onAxis(c.getAxes()))
        return;
      for (Value input : c.getInputs())
        elements += numElements(input);
      into = &allReduce;
    } else if (auto c = dyn_cast<AllGatherOp>(op)) {
      if (!onAxis(c.getAxes()))
        return;
      for (Value result : c.getResults())
        elements += numElements(result);
      into = &other;
    } else if (auto c = dyn_cast<ReduceScatterOp>(op)) {
      if (!onAxis(c.getAxes()))
        return;
      for (Value input : c.getInputs())
        elements += numElements(input);
      into = &other;
    } else {
      return;
    }
    into->calls += 1;
    into->elements += elements;
    into->sentBytes += collectiveSentBytes(op).second;
  });
}

/// What the value `v` that `forward` hands to its backward is called.
std::string describeKept(BlockOp forward, Value v) {
  if (auto result = dyn_cast<OpResult>(v);
      result && result.getOwner() == forward) {
    Value yielded = forward.getYield().getValues()[result.getResultNumber()];
    if (auto att = yielded.getDefiningOp<AttentionOp>();
        att && yielded == att.getLse())
      return describeOp(att) + " log-sum-exp";
    if (Operation *def = yielded.getDefiningOp())
      return describeOp(def);
    return "input";
  }
  return "input";
}

} // namespace

std::optional<BlockActivationFigures>
mlir::loom::measureBlockActivations(ModuleOp module) {
  // 1. The model's shape.
  func::FuncOp modelFunc;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal() && func->hasAttr(LoomDialect::kModelAttr)) {
      modelFunc = func;
      break;
    }
  if (!modelFunc)
    return std::nullopt;
  auto config =
      modelFunc->getAttrOfType<DictionaryAttr>(LoomDialect::kModelAttr);
  auto get = [&](StringRef key) -> int64_t {
    auto value = config.getAs<IntegerAttr>(key);
    return value ? value.getInt() : 0;
  };
  BlockActivationFigures fig;
  fig.s = get("seq");
  fig.h = get("n_embd");
  fig.a = get("n_head");
  int64_t batch = get("batch"), dp = 1;
  auto meshes = module.getOps<MeshOp>();
  if (!meshes.empty()) {
    MeshOp mesh = *meshes.begin();
    if (auto i = mesh.getShape().findAxis("dp"))
      dp = mesh.getShape().getAxisSizes()[*i];
    if (auto i = mesh.getShape().findAxis("tp")) {
      fig.t = mesh.getShape().getAxisSizes()[*i];
      fig.tpAxis = "tp";
    }
  }
  fig.b = dp > 0 ? batch / dp : batch;
  if (fig.s <= 0 || fig.h <= 0 || fig.a <= 0 || fig.b <= 0)
    return std::nullopt;

  // 2. A padded vocabulary, from the parameter table.
  for (BlockArgument arg : modelFunc.getArguments())
    if (auto rows = modelFunc.getArgAttrOfType<IntegerAttr>(
            arg.getArgNumber(), LoomDialect::kUnpaddedRowsAttr)) {
      auto name = modelFunc.getArgAttrOfType<StringAttr>(
          arg.getArgNumber(), LoomDialect::kNameAttr);
      fig.paddedTable = name ? name.str() : "?";
      fig.unpaddedRows = rows.getInt();
      int64_t ways = 1;
      if (auto sharding = modelFunc.getArgAttrOfType<ShardingAttr>(
              arg.getArgNumber(), LoomDialect::kShardingAttr);
          sharding && modelFunc->hasAttr(LoomDialect::kPartitionedAttr) &&
          sharding.getRank() > 0 &&
          llvm::is_contained(sharding.getDimAxes(0), fig.tpAxis))
        ways = fig.t;
      fig.paddedRows =
          cast<RankedTensorType>(arg.getType()).getDimSize(0) * ways;
      break;
    }

  // 3. The first forward block and its backward.
  BlockOp forward, backward;
  llvm::StringMap<BlockOp> byLabel;
  SmallVector<BlockOp> blocks;
  for (auto func : module.getOps<func::FuncOp>())
    func.walk([&](BlockOp block) {
      byLabel.try_emplace(block.getLabel(), block);
      blocks.push_back(block);
    });
  for (BlockOp block : blocks) {
    if (block.getLabel().ends_with(".grad"))
      continue;
    fig.blocks += 1;
    if (!forward) {
      forward = block;
      backward = byLabel.lookup((block.getLabel() + ".grad").str());
    }
  }
  if (!forward)
    return std::nullopt;
  fig.block = forward.getLabel().str();
  // The precision the activations are compiled in: the block's input.
  if (forward.getNumOperands() > 0)
    if (auto type = dyn_cast<RankedTensorType>(forward.getOperand(0).getType());
        type && isa<FloatType>(type.getElementType()))
      fig.valueBytes = (type.getElementTypeBitWidth() + 7) / 8;

  // 4. What the backward reads of the forward: its results, and its inputs
  //    that are activations (not function arguments: the parameters).
  if (backward) {
    llvm::DenseSet<Value> forwardInputs(forward.getInputs().begin(),
                                        forward.getInputs().end());
    llvm::DenseSet<Value> seen;
    for (Value v : backward.getInputs()) {
      bool fromForward =
          (isa<OpResult>(v) && v.getDefiningOp() == forward.getOperation()) ||
          (forwardInputs.contains(v) && !isa<BlockArgument>(v));
      if (!fromForward || !seen.insert(v).second)
        continue;
      KeptActivation k;
      k.what = describeKept(forward, v);
      ArrayRef<int64_t> shape = shapeOf(v);
      k.shape.assign(shape.begin(), shape.end());
      k.bytes = bytesOf(v);
      k.input =
          !(isa<OpResult>(v) && v.getDefiningOp() == forward.getOperation());
      fig.kept.push_back(std::move(k));
    }
    fig.fullRecompute =
        !fig.kept.empty() &&
        llvm::all_of(fig.kept, [](const KeptActivation &k) { return k.input; });
    fig.geluRecomputed =
        !fig.fullRecompute &&
        llvm::any_of(backward.getBody().front(),
                     [](Operation &op) { return isa<GeluOp>(op); });
  }

  // 5. Tensor-parallel collectives of the block.
  if (!fig.tpAxis.empty()) {
    countCollectives(forward, fig.tpAxis, fig.forwardAllReduce,
                     fig.forwardOther);
    if (backward)
      countCollectives(backward, fig.tpAxis, fig.backwardAllReduce,
                       fig.backwardOther);
  }
  return fig;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

void mlir::loom::printBlockActivations(const BlockActivationFigures &fig,
                                       raw_ostream &os) {
  double sbh = sbhOf(fig);
  const char *precision = fig.valueBytes == 4 ? "fp32" : "16-bit";
  auto line = [&](StringRef what, StringRef formula, double bytes) {
    os << llvm::formatv("    {0,-26} {1,-24} = {2:F0} bytes ({3:F2} sbh)\n",
                        what, formula, bytes, bytes / sbh);
  };
  os << llvm::formatv("activations per transformer block ({0} of {1}): s={2} "
                      "b={3} h={4} a={5} t={6}; sbh = {7:F0}\n",
                      fig.block, fig.blocks, fig.s, fig.b, fig.h, fig.a, fig.t,
                      sbh);
  os << "  Korthikanti et al. 2022, 16-bit values and 1-byte dropout masks:\n";
  line("no parallelism", "sbh(34+5as/h)", fig.paperNone(2));
  line("tensor parallel", "sbh(10+24/t+5as/(ht))", fig.paperTensorParallel(2));
  line("tensor + sequence parallel", "sbh(34+5as/h)/t",
       fig.paperSequenceParallel(2));
  line("selective recompute (SP)", "34sbh/t", fig.paperSelective(2));
  os << "  the same accounting with fp32 values (1-byte masks):\n";
  line("no parallelism", "sbh(66+9as/h)", fig.paperNone(4));
  line("tensor parallel", "sbh(18+48/t+9as/(ht))", fig.paperTensorParallel(4));
  line("tensor + sequence parallel", "sbh(66+9as/h)/t",
       fig.paperSequenceParallel(4));
  line("selective recompute (SP)", "66sbh/t", fig.paperSelective(4));
  if (fig.kept.empty()) {
    os << "  Loom keeps: nothing (no backward in this program)\n";
  } else {
    os << llvm::formatv("  Loom keeps (forward values {0}.grad reads, this "
                        "rank, {3}): {1} bytes ({2:F2} sbh)\n",
                        fig.block, fig.keptBytes(), fig.keptBytes() / sbh,
                        precision);
    for (const KeptActivation &k : fig.kept) {
      os << "    " << k.what << " [";
      llvm::interleaveComma(k.shape, os);
      os << "]: " << k.bytes << " bytes\n";
    }
    if (fig.fullRecompute)
      os << llvm::formatv(
          "  why it differs: full recomputation: the backward re-runs the "
          "block's forward from its input, which is all that stays (the "
          "paper's full recomputation keeps {0}); the backward block then "
          "also holds the re-run forward's collectives\n",
          fig.valueBytes == 4
              ? llvm::formatv("2sbh in 16 bits, 4sbh = {0:F0} bytes in fp32",
                              4 * sbh)
                    .str()
              : llvm::formatv("2sbh = {0:F0} bytes in 16 bits, 4sbh in fp32",
                              2 * sbh)
                    .str());
    else
      os << llvm::formatv(
          "  why it differs: Loom has no dropout (no masks) and its attention "
          "keeps q|k|v and recomputes the a*s^2 scores and softmax in the "
          "backward{3}; the paper's {1} tensor-parallel count without masks "
          "and scores{4}, plus attention's fp32 log-sum-exp per row and "
          "head, is {2} = {0:F0} bytes\n",
          fig.expectedLoom(), precision,
          fig.valueBytes == 4 ? (fig.geluRecomputed ? "sbh(16+32/t)+4sab/t"
                                                    : "sbh(16+48/t)+4sab/t")
                              : (fig.geluRecomputed ? "sbh(8+16/t)+4sab/t"
                                                    : "sbh(8+24/t)+4sab/t"),
          fig.geluRecomputed
              ? ", where it also recomputes the MLP's GELU from its input "
                "(selective recomputation)"
              : "",
          fig.geluRecomputed ? " and the GELU's output" : "");
  }
  if (!fig.paddedTable.empty())
    os << "  vocabulary: " << fig.paddedTable << " padded from "
       << fig.unpaddedRows << " to " << fig.paddedRows
       << " rows (masked out of the loss; checkpoints hold " << fig.unpaddedRows
       << ")\n";
  if (fig.t <= 1)
    return;
  int64_t elements = fig.allReduceElements();
  os << llvm::formatv(
      "tensor-parallel traffic per block (Megatron): forward 2 + backward 2 "
      "all-reduces of b*s*h = {0} elements ({1} bytes {4}) on tp={2}: {3} "
      "bytes sent per rank (ring 2(t-1)/t each)\n",
      elements, fig.valueBytes * elements, fig.t, fig.megatronSentBytes(),
      precision);
  auto measured = [&](StringRef what, const BlockCollectives &c) {
    os << llvm::formatv("  Loom's {0}: {1} all-reduce{2} of {3} elements, {4} "
                        "bytes sent per rank\n",
                        what, c.calls, c.calls == 1 ? "" : "s", c.elements,
                        c.sentBytes);
  };
  measured(fig.block, fig.forwardAllReduce);
  measured(fig.block + ".grad", fig.backwardAllReduce);
  if (fig.forwardOther.calls || fig.backwardOther.calls)
    os << llvm::formatv("  Loom's all-gathers and reduce-scatters: {0} "
                        "forward, {1} backward, {2} bytes sent per rank\n",
                        fig.forwardOther.calls, fig.backwardOther.calls,
                        fig.forwardOther.sentBytes +
                            fig.backwardOther.sentBytes);
  os << llvm::formatv(
      "  with sequence parallelism: forward 2 all-gathers + 2 reduce-scatters "
      "of b*s*h, backward the same: 8 x (t-1)/t x {0} = {1} bytes sent per "
      "rank, the all-reduces' volume\n",
      fig.valueBytes * elements, fig.megatronSentBytes());
}

llvm::json::Object
mlir::loom::blockActivationsToJson(const BlockActivationFigures &fig) {
  auto figures = [&](int e) {
    return llvm::json::Object{
        {"none", fig.paperNone(e)},
        {"tensor_parallel", fig.paperTensorParallel(e)},
        {"tensor_sequence_parallel", fig.paperSequenceParallel(e)},
        {"selective_recompute_sp", fig.paperSelective(e)}};
  };
  llvm::json::Array kept;
  for (const KeptActivation &k : fig.kept)
    kept.push_back(llvm::json::Object{{"what", k.what},
                                      {"shape", llvm::json::Array(k.shape)},
                                      {"bytes", k.bytes}});
  auto collectives = [](const BlockCollectives &c) {
    return llvm::json::Object{{"calls", c.calls},
                              {"elements", c.elements},
                              {"sent_bytes", c.sentBytes}};
  };
  llvm::json::Object root{
      {"block", fig.block},
      {"blocks", fig.blocks},
      {"s", fig.s},
      {"b", fig.b},
      {"h", fig.h},
      {"a", fig.a},
      {"t", fig.t},
      {"paper_bytes_16bit", figures(2)},
      {"paper_bytes_fp32", figures(4)},
      {"loom_kept_bytes", fig.keptBytes()},
      {"loom_full_recompute", fig.fullRecompute},
      {"loom_gelu_recomputed", fig.geluRecomputed},
      {"loom_kept", std::move(kept)},
      {"expected_loom_bytes", fig.expectedLoom()},
      {"value_bytes", fig.valueBytes},
  };
  if (!fig.paddedTable.empty())
    root["vocab_padding"] = llvm::json::Object{{"table", fig.paddedTable},
                                               {"rows", fig.unpaddedRows},
                                               {"padded_rows", fig.paddedRows}};
  if (fig.t > 1)
    root["tensor_parallel_traffic"] = llvm::json::Object{
        {"all_reduce_elements", fig.allReduceElements()},
        {"megatron_sent_bytes", fig.megatronSentBytes()},
        {"sequence_parallel_sent_bytes", fig.megatronSentBytes()},
        {"forward_all_reduce", collectives(fig.forwardAllReduce)},
        {"backward_all_reduce", collectives(fig.backwardAllReduce)},
        {"forward_gather_scatter", collectives(fig.forwardOther)},
        {"backward_gather_scatter", collectives(fig.backwardOther)}};
  return root;
}
