//===- TensorParallel.cpp - Megatron shardings on tp ------------*- C++ -*-===//
//
// `--loom-tensor-parallel`: Megatron-LM tensor parallelism is shardings on
// the tp axis, not a code path. This pass seeds the parameters (and their
// training state) and, when it splits the vocabulary, rewrites the loss into
// ops whose sharding rules make it vocab-parallel; propagation and the
// partitioner do the rest.
//
// Parameters are recognized by the role they play in the forward graph, so
// any model built from the same ops gets the same layout:
//
//   attention(linear(x, Wqkv, bqkv))  Wqkv, bqkv column-parallel (heads)
//   linear(attention(...), Wo, bo)    Wo row-parallel, bo whole
//   linear(gelu(linear(x, W1, b1)), W2, b2)
//                                     W1, b1 column-, W2 row-parallel
//   embedding(table, ids)             table vocab-parallel (rows); the
//                                     loss becomes vocab-parallel too
//
// A table whose rows tp does not divide is padded first (VocabPadding.h).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/Sharding/OpNames.h"
#include "passes/Sharding/VocabPadding.h"
#include "passes/Sharding/SequenceParallel.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "loom-tensor-parallel"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMTENSORPARALLEL
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// Sets `loom.sharding` on the arguments in `shardings` at once (setArgAttr
/// rebuilds the whole list each call: quadratic in the argument count).
void setArgShardings(func::FuncOp func,
                     ArrayRef<std::pair<unsigned, ShardingAttr>> shardings) {
  if (shardings.empty())
    return;
  SmallVector<DictionaryAttr> argAttrs;
  func.getAllArgAttrs(argAttrs);
  for (auto [i, sharding] : shardings) {
    NamedAttrList attrs(argAttrs[i]);
    attrs.set(LoomDialect::kShardingAttr, sharding);
    argAttrs[i] = attrs.getDictionary(func.getContext());
  }
  func.setAllArgAttrs(argAttrs);
}

bool isTrainingState(Role role) {
  return role == Role::Param || role == Role::Grad || role == Role::AdamM ||
         role == Role::AdamV || role == Role::Master;
}

/// Which dimension of which parameter the axis splits, and why.
struct Seed {
  int64_t dim;
  std::string role; // "column-parallel h.0.mlp.c_fc", for diagnostics
  Operation *op;
};

class MegatronSeeder {
public:
  MegatronSeeder(ModuleOp module, MeshOp mesh, StringRef axis, int64_t ways,
                 int64_t vocabDivisibleBy)
      : module(module), mesh(mesh), axis(axis), ways(ways),
        vocabDivisibleBy(vocabDivisibleBy) {}

  /// Finds the Megatron roles in every function; fails (with a diagnostic)
  /// on a split the sizes do not allow.
  LogicalResult findRoles();
  /// Writes the seeds on every argument holding a seeded parameter or its
  /// training state. Returns the number of parameters seeded.
  FailureOr<size_t> apply();
  /// Whether an embedding table was split on its rows (the vocabulary).
  bool splitsVocabulary() const { return vocabParallel; }
  /// Pads the embedding tables whose rows `ways` does not divide (before
  /// apply(), after the loss is vocab-parallel: the padding spreads along
  /// its factors).
  LogicalResult padTables();
  /// The dimension of `param` (seen through block arguments) a seed splits.
  std::optional<int64_t> splitDimOf(Value param) const;

private:
  /// Seeds the parameter `weight` (seen through block arguments) on `dim`.
  LogicalResult seed(Value param, int64_t dim, const Twine &role,
                     Operation *op);
  LogicalResult columnParallel(LinearOp linear, const Twine &why);
  LogicalResult rowParallel(LinearOp linear, const Twine &why);
  LogicalResult visitAttention(AttentionOp attention);
  LogicalResult visitGelu(GeluOp gelu);
  LogicalResult visitEmbedding(EmbeddingOp embedding);

  ModuleOp module;
  MeshOp mesh;
  StringRef axis;
  int64_t ways;
  int64_t vocabDivisibleBy;
  llvm::MapVector<StringAttr, Seed> seeds;
  /// Embedding tables to pad: name -> (rows, padded rows).
  llvm::MapVector<StringAttr, std::pair<int64_t, int64_t>> padding;
  bool vocabParallel = false;
};

LogicalResult MegatronSeeder::seed(Value param, int64_t dim, const Twine &role,
                                   Operation *op) {
  auto arg = functionArgumentOf(param);
  if (!arg)
    return success(); // computed, not a parameter: propagation decides
  auto [func, index] = *arg;
  auto r = func.getArgAttrOfType<RoleAttr>(index, LoomDialect::kRoleAttr);
  auto name = func.getArgAttrOfType<StringAttr>(index, LoomDialect::kNameAttr);
  if (!r || r.getValue() != Role::Param || !name)
    return success();
  int64_t size = cast<RankedTensorType>(param.getType()).getDimSize(dim);
  if (auto pad = padding.find(name); pad != padding.end() && dim == 0)
    size = pad->second.second; // split after padTables()
  if (size % ways != 0)
    return op->emitOpError()
           << "is " << role << " over " << axis << " = " << ways
           << ", but dimension " << dim << " of " << name << " has size "
           << size << ", not divisible by " << ways << "; choose " << axis
           << " dividing " << size;
  auto [it, inserted] = seeds.try_emplace(name, Seed{dim, role.str(), op});
  if (!inserted && it->second.dim != dim)
    return op->emitOpError()
           << "is " << role << ", which splits dimension " << dim << " of "
           << name << ", but it is also " << it->second.role
           << ", which splits dimension " << it->second.dim
           << "; annotate the parameter by hand (loom.sharding) to choose";
  return success();
}

std::optional<int64_t> MegatronSeeder::splitDimOf(Value param) const {
  auto arg = functionArgumentOf(param);
  if (!arg)
    return std::nullopt;
  auto [func, index] = *arg;
  auto name = func.getArgAttrOfType<StringAttr>(index, LoomDialect::kNameAttr);
  auto role = func.getArgAttrOfType<RoleAttr>(index, LoomDialect::kRoleAttr);
  if (!name || !role || role.getValue() != Role::Param)
    return std::nullopt;
  auto it = seeds.find(name);
  if (it == seeds.end())
    return std::nullopt;
  return it->second.dim;
}

LogicalResult MegatronSeeder::columnParallel(LinearOp linear,
                                             const Twine &why) {
  std::string role = "column-parallel " + describeOp(linear) + " (" + why.str() +
                     ")";
  int64_t last = cast<RankedTensorType>(linear.getWeight().getType()).getRank() - 1;
  if (failed(seed(linear.getWeight(), last, role, linear)))
    return failure();
  if (Value bias = linear.getBias())
    return seed(bias, cast<RankedTensorType>(bias.getType()).getRank() - 1,
                role, linear);
  return success();
}

LogicalResult MegatronSeeder::rowParallel(LinearOp linear, const Twine &why) {
  // The bias stays whole: the partitioner adds it after the all-reduce.
  return seed(linear.getWeight(), 0,
              "row-parallel " + describeOp(linear) + " (" + why.str() + ")",
              linear);
}

LogicalResult MegatronSeeder::visitAttention(AttentionOp attention) {
  int64_t heads = attention.getNumHeads();
  auto qkvType = cast<RankedTensorType>(attention.getQkv().getType());
  if (qkvType.getRank() != 4) {
    attention.emitRemark()
        << "takes q|k|v packed as " << qkvType
        << ": heads cannot be split as a dimension, so this attention stays "
           "replicated over "
        << axis << " (give it [batch, seq, 3, channels], as the GPT importer "
                   "does)";
    return success();
  }
  if (heads % ways != 0)
    return attention.emitOpError()
           << "has n_head = " << heads << " attention heads, not divisible by "
           << axis << " = " << ways
           << ": tensor parallelism gives every rank whole heads; choose "
           << axis << " dividing " << heads;
  if (auto qkv = attention.getQkv().getDefiningOp<LinearOp>())
    if (failed(columnParallel(qkv, "q, k, v of " + describeOp(attention))))
      return failure();
  for (Operation *user : attention.getResult().getUsers())
    if (auto proj = dyn_cast<LinearOp>(user))
      if (proj.getInput() == attention.getResult() &&
          failed(rowParallel(proj, "output of " + describeOp(attention))))
        return failure();
  return success();
}

LogicalResult MegatronSeeder::visitGelu(GeluOp gelu) {
  auto fc = gelu.getInput().getDefiningOp<LinearOp>();
  if (!fc)
    return success();
  SmallVector<LinearOp> projections;
  for (Operation *user : gelu.getResult().getUsers())
    if (auto proj = dyn_cast<LinearOp>(user))
      if (proj.getInput() == gelu.getResult())
        projections.push_back(proj);
  if (projections.empty())
    return success();
  int64_t hidden = cast<RankedTensorType>(fc.getResult().getType()).getShape().back();
  if (hidden % ways != 0)
    return fc.emitOpError() << "is the first linear of an MLP whose hidden "
                               "size "
                            << hidden << " is not divisible by " << axis
                            << " = " << ways << "; choose " << axis
                            << " dividing " << hidden;
  if (failed(columnParallel(fc, "MLP input")))
    return failure();
  for (LinearOp proj : projections)
    if (failed(rowParallel(proj, "MLP output")))
      return failure();
  return success();
}

LogicalResult MegatronSeeder::visitEmbedding(EmbeddingOp embedding) {
  int64_t vocab =
      cast<RankedTensorType>(embedding.getTable().getType()).getDimSize(0);
  auto arg = functionArgumentOf(embedding.getTable());
  if (arg)
    vocabParallel = true;
  // Every rank gets the same number of rows: pad what tp does not divide.
  int64_t padded = paddedRows(vocab, ways, vocabDivisibleBy);
  if (padded != vocab && arg) {
    auto [func, index] = *arg;
    if (auto name = func.getArgAttrOfType<StringAttr>(index,
                                                      LoomDialect::kNameAttr))
      padding.insert({name, {vocab, padded}});
  }
  return seed(embedding.getTable(), 0, "vocab-parallel " + describeOp(embedding),
              embedding);
}

LogicalResult MegatronSeeder::findRoles() {
  for (auto func : module.getOps<func::FuncOp>()) {
    WalkResult walk = func.walk([&](Operation *op) {
      LogicalResult ok = success();
      if (auto attention = dyn_cast<AttentionOp>(op))
        ok = visitAttention(attention);
      else if (auto gelu = dyn_cast<GeluOp>(op))
        ok = visitGelu(gelu);
      else if (auto embedding = dyn_cast<EmbeddingOp>(op))
        ok = visitEmbedding(embedding);
      return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  return success();
}

LogicalResult MegatronSeeder::padTables() {
  for (auto &[name, sizes] : padding)
    if (failed(padParameterRows(module, name, sizes.first, sizes.second,
                                "for tensor parallelism; use a vocabulary "
                                "the tp size divides")))
      return failure();
  return success();
}

FailureOr<size_t> MegatronSeeder::apply() {
  Builder b(module.getContext());
  for (auto func : module.getOps<func::FuncOp>()) {
    SmallVector<std::pair<unsigned, ShardingAttr>> argShardings;
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
      auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
      if (!role || !name || !isTrainingState(role.getValue()))
        continue;
      auto it = seeds.find(name);
      if (it == seeds.end())
        continue;
      auto type = cast<RankedTensorType>(arg.getType());
      SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
      dims[it->second.dim] = b.getArrayAttr({b.getStringAttr(axis)});
      auto sharding = ShardingAttr::get(
          module.getContext(), FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
          b.getArrayAttr(dims), b.getArrayAttr({}));
      if (failed(verifyShardingForType(sharding, type, mesh, [&]() {
            return func.emitOpError()
                   << "cannot split argument #" << i << " (" << name << ") "
                   << "over " << axis << ": ";
          })))
        return failure();
      argShardings.emplace_back(i, sharding);
      LLVM_DEBUG(llvm::dbgs() << "seeded " << name << " ("
                              << stringifyRole(role.getValue()) << ") dim "
                              << it->second.dim << ": " << it->second.role
                              << "\n");
    }
    setArgShardings(func, argShardings);
  }
  return seeds.size();
}

/// `name` + `suffix` as a NameLoc, for the ops a rewrite makes from `loc`.
Location subLoc(Location loc, StringRef suffix) {
  if (auto named = dyn_cast<NameLoc>(loc))
    return NameLoc::get(
        StringAttr::get(loc.getContext(), named.getName().str() + suffix.str()),
        named.getChildLoc());
  return loc;
}

/// Megatron's vocab-parallel cross-entropy: every loom.cross_entropy becomes
/// row_max -> cross_entropy_sums -> cross_entropy_from_sums and each of its
/// gradients a cross_entropy_sums_grad reading the forward's statistics, so
/// that logits split on the vocabulary are reduced as two per-token
/// statistics (all-reduce max, then sum) and never gathered. The ops'
/// sharding rules place the collectives; unsplit logits compute the same
/// loss.
void splitCrossEntropyOverVocab(ModuleOp module) {
  SmallVector<CrossEntropyOp> losses;
  module.walk([&](CrossEntropyOp ce) { losses.push_back(ce); });
  for (CrossEntropyOp ce : losses) {
    Value logits = ce.getLogits(), targets = ce.getTargets();
    // The per-token statistics in at least f32: bf16 logits (mixed
    // precision) keep an fp32 maximum, sum and target logit, as Megatron's
    // vocab-parallel cross-entropy computes in fp32.
    auto logitsType = cast<RankedTensorType>(logits.getType());
    Type statistic = logitsType.getElementType();
    if (statistic.getIntOrFloatBitWidth() < 32)
      statistic = Float32Type::get(module.getContext());
    auto tokensType =
        RankedTensorType::get(logitsType.getShape().drop_back(), statistic);
    // Logits already padded (vocab_size) keep their padding masked.
    IntegerAttr vocab = ce.getVocabSizeAttr();
    auto statistics = [&](OpBuilder &b, Location loc) {
      auto max = RowMaxOp::create(b, subLoc(loc, ".max"), tokensType, logits);
      if (vocab)
        max.setVocabSizeAttr(vocab);
      auto sums = CrossEntropySumsOp::create(b, subLoc(loc, ".sums"),
                                             tokensType, tokensType, logits,
                                             max, targets, ArrayAttr(), vocab);
      return std::make_tuple(Value(max), sums.getSumExp(),
                             sums.getTargetLogit());
    };
    OpBuilder b(ce);
    auto [max, sumExp, targetLogit] = statistics(b, ce.getLoc());
    Value loss = CrossEntropyFromSumsOp::create(
        b, ce.getLoc(), ce.getType(), max, sumExp, targetLogit,
        ce.getNumTokensAttr());
    SmallVector<CrossEntropyGradOp> grads;
    for (Operation *user : logits.getUsers())
      if (auto grad = dyn_cast<CrossEntropyGradOp>(user))
        if (grad.getTargets() == targets)
          grads.push_back(grad);
    for (CrossEntropyGradOp grad : grads) {
      OpBuilder gb(grad);
      // The forward's statistics where they are visible, else recomputed.
      Value gradMax = max, gradSumExp = sumExp;
      if (grad->getBlock() != ce->getBlock())
        std::tie(gradMax, gradSumExp, std::ignore) =
            statistics(gb, grad.getLoc());
      Value dlogits = CrossEntropySumsGradOp::create(
          gb, grad.getLoc(), grad.getType(), grad.getDloss(), logits, gradMax,
          gradSumExp, targets, ArrayAttr(), grad.getNumTokensAttr(), vocab);
      grad.getResult().replaceAllUsesWith(dlogits);
      grad.erase();
    }
    ce.getResult().replaceAllUsesWith(loss);
    ce.erase();
  }
}

/// Hand-written shardings on `axis`: copied from each parameter to its
/// training state (gradient accumulator, moments) where that has none.
/// Returns the names of the annotated parameters.
SmallVector<StringAttr> honourAnnotations(ModuleOp module, StringRef axis) {
  llvm::MapVector<StringAttr, ShardingAttr> annotated;
  for (auto func : module.getOps<func::FuncOp>())
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
      auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
      auto sharding = func.getArgAttrOfType<ShardingAttr>(
          i, LoomDialect::kShardingAttr);
      if (!role || role.getValue() != Role::Param || !name || !sharding)
        continue;
      bool onAxis = false;
      for (unsigned d = 0; d < sharding.getRank(); ++d)
        onAxis |= llvm::is_contained(sharding.getDimAxes(d), axis);
      if (onAxis)
        annotated.insert({name, sharding});
    }
  for (auto func : module.getOps<func::FuncOp>()) {
    SmallVector<std::pair<unsigned, ShardingAttr>> argShardings;
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
      auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
      if (!role || !name || !isTrainingState(role.getValue()) ||
          func.getArgAttr(i, LoomDialect::kShardingAttr))
        continue;
      if (auto it = annotated.find(name); it != annotated.end())
        argShardings.emplace_back(i, it->second);
    }
    setArgShardings(func, argShardings);
  }
  return llvm::to_vector(llvm::make_first_range(annotated));
}

struct LoomTensorParallelPass
    : mlir::loom::impl::LoomTensorParallelBase<LoomTensorParallelPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<MeshOp> meshes(module.getOps<MeshOp>());
    if (meshes.size() != 1) {
      module.emitError() << "loom-tensor-parallel: needs exactly one "
                            "loom.mesh, found "
                         << meshes.size();
      return signalPassFailure();
    }
    MeshOp mesh = meshes.front();
    std::optional<unsigned> index = mesh.getShape().findAxis(axis);
    if (!index) {
      mesh.emitOpError() << "has no axis '" << axis
                         << "' for tensor parallelism (axes: "
                         << mesh.getShape().axisNamesForDiagnostic() << ")";
      return signalPassFailure();
    }
    int64_t ways = mesh.getShape().getAxisSizes()[*index];
    if (ways == 1)
      return; // one rank per group: nothing to split

    // 1. Hand-written shardings win (GSPMD's mark_sharding): the user chose
    //    the layout; Megatron's is not mixed in.
    SmallVector<StringAttr> annotated = honourAnnotations(module, axis);
    if (!annotated.empty()) {
      if (sequenceParallel) {
        module.emitError()
            << "loom-tensor-parallel: sequence-parallel splits the residual "
               "stream around Megatron's column- and row-parallel linears, "
               "but "
            << annotated.size() << " parameter(s) carry hand-written "
            << "shardings on " << axis << " (e.g. " << annotated.front()
            << "), which replace Megatron's layout; drop sequence-parallel "
               "or the hand-written shardings";
        return signalPassFailure();
      }
      LLVM_DEBUG(llvm::dbgs() << annotated.size()
                              << " hand-written shardings on " << axis
                              << "; no Megatron seeding\n");
      return;
    }

    // 2. Megatron's layout, by role.
    if (vocabDivisibleBy < 1) {
      module.emitError() << "loom-tensor-parallel: vocab-divisible-by = "
                         << static_cast<int64_t>(vocabDivisibleBy)
                         << " must be >= 1 (128 is Megatron's default; 1 "
                            "pads to the next multiple of "
                         << axis << ")";
      return signalPassFailure();
    }
    MegatronSeeder seeder(module, mesh, axis, ways, vocabDivisibleBy);
    if (failed(seeder.findRoles()))
      return signalPassFailure();
    // 3. The logits of an LM head tied to a vocab-parallel embedding come
    //    out split on the vocabulary: the loss reduces them in place.
    if (seeder.splitsVocabulary())
      splitCrossEntropyOverVocab(module);
    // 4. A vocabulary tp does not divide is padded (after 3: the padding
    //    follows the vocab-parallel loss's factors to the loss).
    if (failed(seeder.padTables()))
      return signalPassFailure();
    FailureOr<size_t> seeded = seeder.apply();
    if (failed(seeded))
      return signalPassFailure();
    // 5. Sequence parallelism: the residual stream between the matmuls
    //    splits on the sequence over the same axis.
    if (sequenceParallel && *seeded != 0 &&
        failed(seedSequenceParallel(
            module, mesh, axis, ways,
            [&](Value param) { return seeder.splitDimOf(param); })))
      return signalPassFailure();
    if (*seeded == 0)
      module.emitRemark()
          << "tensor parallelism over " << axis << " = " << ways
          << ": no parameter has a Megatron role (attention q|k|v and output "
             "linears, linear-gelu-linear MLP, embedding) or a hand-written "
             "sharding on "
          << axis << "; the model stays replicated: every " << axis
          << " rank computes the same values";
  }
};

} // namespace
