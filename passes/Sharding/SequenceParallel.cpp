//===- SequenceParallel.cpp - Megatron sequence-parallel seeds --*- C++ -*-===//
//
// Korthikanti et al. 2022: between the tensor-parallel matmuls, the
// residual stream (embedding output, layer norms, residual adds, dropout
// in their model) is replicated over tp under plain Megatron; sequence
// parallelism splits it on the sequence instead. Each all-reduce of a
// row-parallel output becomes a reduce-scatter onto sequence shards and
// each column-parallel input an all-gather of them: the same volume, and
// the residual stream's activations shrink by tp.
//
// This file only seeds shardings. Where a value's sequence split and a
// weight's Megatron split compete for the axis in one op (a column-parallel
// linear reads a sequence-split input with a column-split weight), the op's
// result is seeded with the Megatron split; propagation keeps a decided
// result's split and the partitioner derives the collective that reshards
// the activation.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/SequenceParallel.h"
#include "passes/Sharding/OpNames.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "loom-sequence-parallel"

using namespace mlir;
using namespace mlir::loom;

namespace {

/// The op computing `v`, seen through `loom.block` arguments (to the block's
/// input) and results (to the yielded value).
Operation *producerOf(Value v) {
  while (true) {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      auto block = dyn_cast<BlockOp>(arg.getOwner()->getParentOp());
      if (!block)
        return nullptr;
      v = block.getInputs()[arg.getArgNumber()];
      continue;
    }
    Operation *op = v.getDefiningOp();
    if (auto block = dyn_cast_or_null<BlockOp>(op)) {
      v = block.getYield().getValues()[cast<OpResult>(v).getResultNumber()];
      continue;
    }
    return op;
  }
}

class SequenceParallelSeeder {
public:
  SequenceParallelSeeder(MeshOp mesh, StringRef axis, int64_t ways,
                         const ParamSplitFn &splitDimOf)
      : mesh(mesh), axis(axis), ways(ways), splitDimOf(splitDimOf),
        b(mesh.getContext()) {}

  /// 1. Every layer norm's sequence divides by the axis.
  LogicalResult checkSequences(ModuleOp module);
  /// 2. Row-parallel biases move after the reduction.
  void splitRowParallelBiases(ModuleOp module);
  /// 3. The seeds.
  void seed(ModuleOp module);

private:
  /// A sharding of a rank-`rank` value: `axis` on `dim` (if any), partial
  /// over `axis` when `partial`.
  ShardingAttr sharding(int64_t rank, std::optional<int64_t> dim,
                        bool partial) {
    SmallVector<Attribute> dims(rank, b.getArrayAttr({}));
    if (dim)
      dims[*dim] = b.getArrayAttr({b.getStringAttr(axis)});
    return ShardingAttr::get(
        b.getContext(), FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
        b.getArrayAttr(dims),
        partial ? b.getArrayAttr({b.getStringAttr(axis)}) : b.getArrayAttr({}));
  }
  /// Seeds result `index` of `op` (the others stay free: replicated seeds
  /// would be open anyway, so they are left to propagation).
  void seedResult(Operation *op, unsigned index, ShardingAttr s);
  void seedSequence(Value v);
  /// Whether `weight` is split on its output (N) dimension, on K, or not
  /// at all, for a weight `[K, N...]` (or `[N, K]` when `transposed`).
  enum class Split { None, Column, Row };
  Split splitOf(Value weight, bool transposed);

  MeshOp mesh;
  StringRef axis;
  int64_t ways;
  const ParamSplitFn &splitDimOf;
  Builder b;
};

LogicalResult SequenceParallelSeeder::checkSequences(ModuleOp module) {
  WalkResult walk = module.walk([&](LayerNormOp ln) {
    auto type = cast<RankedTensorType>(ln.getInput().getType());
    if (type.getRank() < 2) {
      ln.emitOpError() << "normalizes a single vector " << type
                       << ": sequence parallelism splits the tokens of the "
                          "residual stream over "
                       << axis << " and this layer norm has none; drop "
                                  "sequence-parallel";
      return WalkResult::interrupt();
    }
    int64_t seq = type.getDimSize(type.getRank() - 2);
    if (seq % ways != 0) {
      ln.emitOpError()
          << "normalizes sequences of " << seq
          << " tokens (the sequence length: --seq, by default the config's "
             "n_positions (n_ctx)), not divisible by "
          << axis << " = " << ways
          << ": sequence parallelism gives every " << axis
          << " rank the same number of tokens; choose --seq divisible by "
          << ways << " (e.g. " << (seq + ways - 1) / ways * ways
          << ") or drop sequence-parallel";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

SequenceParallelSeeder::Split
SequenceParallelSeeder::splitOf(Value weight, bool transposed) {
  std::optional<int64_t> dim = splitDimOf(weight);
  if (!dim)
    return Split::None;
  int64_t kDim = transposed ? cast<RankedTensorType>(weight.getType()).getRank() - 1
                            : 0;
  return *dim == kDim ? Split::Row : Split::Column;
}

void SequenceParallelSeeder::splitRowParallelBiases(ModuleOp module) {
  // Megatron's row-parallel linear under sequence parallelism adds its bias
  // after the reduce-scatter, to this rank's tokens. (Without sequence
  // parallelism the partitioner splits it off itself, before the
  // all-reduce's consumer; here the add must exist before propagation so
  // that it takes the residual stream's sequence split.)
  SmallVector<LinearOp> rows;
  module.walk([&](LinearOp linear) {
    if (linear.getBias() &&
        splitOf(linear.getWeight(), /*transposed=*/false) == Split::Row)
      rows.push_back(linear);
  });
  for (LinearOp linear : rows) {
    OpBuilder ob(linear);
    auto product = LinearOp::create(ob, linear.getLoc(), linear.getType(),
                                    linear.getInput(), linear.getWeight(),
                                    Value());
    auto add = AddOp::create(
        ob,
        NameLoc::get(ob.getStringAttr(describeOp(linear.getOperation()) +
                                      ".bias")),
        linear.getType(), product.getResult(), linear.getBias());
    linear.getResult().replaceAllUsesWith(add.getResult());
    linear.erase();
    // Seeded like the residual stream it joins: otherwise the batch split
    // (dp) it inherits from the product would be decided first and close it
    // to the sequence split.
    seedSequence(add.getResult());
  }
}

void SequenceParallelSeeder::seedResult(Operation *op, unsigned index,
                                        ShardingAttr s) {
  SmallVector<Attribute> attrs;
  if (auto existing = op->getAttrOfType<ArrayAttr>(LoomDialect::kShardingsAttr))
    attrs.assign(existing.begin(), existing.end());
  else
    for (Value r : op->getResults())
      attrs.push_back(
          sharding(cast<RankedTensorType>(r.getType()).getRank(), std::nullopt,
                   /*partial=*/false));
  attrs[index] = s;
  op->setAttr(LoomDialect::kShardingsAttr, b.getArrayAttr(attrs));
  LLVM_DEBUG(llvm::dbgs() << "seeded " << describeOp(op) << " #" << index
                          << ": " << s << "\n");
}

void SequenceParallelSeeder::seedSequence(Value v) {
  auto result = dyn_cast<OpResult>(v);
  if (!result)
    return;
  int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
  seedResult(result.getOwner(), result.getResultNumber(),
             sharding(rank, rank - 2, /*partial=*/false));
}

void SequenceParallelSeeder::seed(ModuleOp module) {
  module.walk([&](Operation *op) {
    // The residual stream: each layer norm's output, and the residual add
    // (or embedding sum) its input comes from.
    if (auto ln = dyn_cast<LayerNormOp>(op)) {
      seedSequence(ln.getResult());
      if (auto add = dyn_cast_or_null<AddOp>(producerOf(ln.getInput())))
        seedSequence(add.getResult());
      return;
    }
    // The vocab-parallel embedding reads every token of its rows (its
    // partial sums are then reduce-scattered onto the sequence): the ids
    // stay whole over the axis, where the backward's sequence-split
    // gradient would otherwise pull a split onto them.
    if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
      Value ids = embedding.getIds();
      while (auto arg = dyn_cast<BlockArgument>(ids)) {
        auto block = dyn_cast<BlockOp>(arg.getOwner()->getParentOp());
        if (!block)
          break;
        ids = block.getInputs()[arg.getArgNumber()];
      }
      auto arg = dyn_cast<BlockArgument>(ids);
      auto func = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                      : func::FuncOp();
      if (func && !func.getArgAttr(arg.getArgNumber(),
                                   LoomDialect::kShardingAttr))
        func.setArgAttr(arg.getArgNumber(), LoomDialect::kShardingAttr,
                        sharding(cast<RankedTensorType>(ids.getType()).getRank(),
                                 std::nullopt, /*partial=*/false));
      return;
    }
    // The tied table's gradient, as Megatron's vocab-parallel embedding
    // computes it: from the whole sequence's output gradient (gathered, the
    // mirror of the forward's reduce-scatter: b·s·h), each rank keeping its
    // vocabulary rows. Seeding the rows on the axis closes it: left open,
    // the gradient would be a partial sum over the sequence shards and
    // reduce-scattered whole (vocab·h, far more for a real vocabulary).
    // (The kernel builds the whole table; the partitioner takes this
    // rank's rows of it, with no traffic.)
    if (auto grad = dyn_cast<EmbeddingGradOp>(op)) {
      seedResult(op, 0, sharding(2, 0, /*partial=*/false));
      return;
    }
    auto lastDim = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getRank() - 1;
    };
    // Column-parallel matmuls keep their output split (the sequence-split
    // input is gathered before them); in the backward their input gradient
    // is a partial sum, reduce-scattered onto the sequence by the layer
    // norm gradient that reads it. Row-parallel ones: the backward's
    // output-gradient is gathered, the input gradient keeps the split.
    if (auto linear = dyn_cast<LinearOp>(op)) {
      if (splitOf(linear.getWeight(), false) == Split::Column)
        seedResult(op, 0,
                   sharding(lastDim(linear.getResult()) + 1,
                            lastDim(linear.getResult()), false));
    } else if (auto matmul = dyn_cast<MatmulOp>(op)) {
      if (splitOf(matmul.getRhs(), matmul.getTransposeRhs()) == Split::Column)
        seedResult(op, 0,
                   sharding(lastDim(matmul.getResult()) + 1,
                            lastDim(matmul.getResult()), false));
    } else if (auto grad = dyn_cast<LinearGradOp>(op)) {
      int64_t rank = lastDim(grad.getInputGrad()) + 1;
      switch (splitOf(grad.getWeight(), false)) {
      case Split::Column:
        seedResult(op, 0, sharding(rank, std::nullopt, /*partial=*/true));
        break;
      case Split::Row:
        seedResult(op, 0, sharding(rank, rank - 1, false));
        break;
      case Split::None:
        break;
      }
    } else if (auto grad = dyn_cast<MatmulGradOp>(op)) {
      if (splitOf(grad.getRhs(), grad.getTransposeRhs()) == Split::Column)
        seedResult(op, 0,
                   sharding(lastDim(grad.getLhsGrad()) + 1, std::nullopt,
                            /*partial=*/true));
    }
  });
}

} // namespace

LogicalResult mlir::loom::seedSequenceParallel(ModuleOp module, MeshOp mesh,
                                               StringRef axis, int64_t ways,
                                               const ParamSplitFn &splitDimOf) {
  SequenceParallelSeeder seeder(mesh, axis, ways, splitDimOf);
  if (failed(seeder.checkSequences(module)))
    return failure();
  seeder.splitRowParallelBiases(module);
  seeder.seed(module);
  return success();
}
