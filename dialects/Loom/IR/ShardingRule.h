//===- ShardingRule.h - Factor-based sharding rules of ops ------*- C++ -*-===//
//
// What ShardingRuleOpInterface returns: which dimensions of an op's operands
// and results may be split, which must be split together, and which splits
// leave partial sums. Propagation and the partitioner read only this.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_LOOM_IR_SHARDINGRULE_H
#define LOOM_DIALECTS_LOOM_IR_SHARDINGRULE_H

#include "dialects/Loom/IR/LoomDialect.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace mlir::loom {

/// Each operand and result dimension maps to a factor (or kNoFactor: the
/// dimension must stay whole). Dimensions mapped to one factor must be split
/// identically. A factor missing from a result is contracted for it (a
/// matmul's K, the tokens a weight gradient sums over): split, it leaves
/// that result holding partial sums over the splitting axes.
struct ShardingRule {
  static constexpr int64_t kNoFactor = -1;

  llvm::SmallVector<int64_t> factorSizes;
  /// Whether the factor is a real contraction when missing from a result;
  /// false for factors of ops that keep a missing factor whole.
  llvm::SmallVector<bool> isReduction;
  /// How a split contraction's partial results combine: by sum (a matmul's
  /// K) or by max (a row maximum over the vocabulary).
  llvm::SmallVector<ReductionKind> reductionKind;
  /// The op is linear in its operands (addition): operands holding partial
  /// sums over the same axes give a result holding partial sums, so the
  /// reduction can wait until after the op.
  bool partialSumsPassThrough = false;
  llvm::SmallVector<llvm::SmallVector<int64_t>> operandFactors;
  llvm::SmallVector<llvm::SmallVector<int64_t>> resultFactors;

  /// Adds a factor of `size` and returns its index.
  int64_t addFactor(int64_t size, bool reduction = false,
                    ReductionKind kind = ReductionKind::Sum) {
    factorSizes.push_back(size);
    isReduction.push_back(reduction);
    reductionKind.push_back(kind);
    return static_cast<int64_t>(factorSizes.size()) - 1;
  }
  /// Appends an operand (or result) whose dimensions map to `factors`.
  void addOperand(llvm::ArrayRef<int64_t> factors) {
    operandFactors.emplace_back(factors.begin(), factors.end());
  }
  void addResult(llvm::ArrayRef<int64_t> factors) {
    resultFactors.emplace_back(factors.begin(), factors.end());
  }
};

} // namespace mlir::loom

#endif // LOOM_DIALECTS_LOOM_IR_SHARDINGRULE_H
