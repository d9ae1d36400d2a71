//===- ModelSummary.h - Parameter and FLOP figures of a model ---*- C++ -*-===//
//
// What `--loom-summary` prints, as data: Φ (total, per block, outside the
// blocks), tokens and forward cost of one step. `loom plan` reads Φ through
// this same function, so the planner and the summary never disagree.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_ANALYSIS_MODELSUMMARY_H
#define LOOM_PASSES_ANALYSIS_MODELSUMMARY_H

#include "dialects/Loom/IR/LoomOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <string>
#include <utility>

namespace mlir::loom {

/// What the summary reports about one model function.
struct ModelFigures {
  std::string function;
  DictionaryAttr config;
  /// Φ: elements of every parameter, each counted once (tied weights once).
  int64_t params = 0;
  int64_t paramsInBlocks = 0;
  int64_t numBlocks = 0;
  int64_t tokensPerStep = 0;
  int64_t forwardFlops = 0;
  int64_t forwardBytes = 0;
  /// Parameters used outside any block, by name, in argument order.
  SmallVector<std::pair<std::string, int64_t>> outsideBlocks;
  /// Parameter count per block label, in program order.
  SmallVector<std::pair<std::string, int64_t>> perBlock;
};

/// The figures of a model function (one carrying `loom.model`).
ModelFigures measureModel(func::FuncOp func);

} // namespace mlir::loom

#endif // LOOM_PASSES_ANALYSIS_MODELSUMMARY_H
