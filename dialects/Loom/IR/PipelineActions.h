//===- PipelineActions.h - Actions of a pipeline schedule -------*- C++ -*-===//
//
// The unit of a pipeline schedule: the forward or the backward of one model
// chunk on one micro-batch. `loom.pipeline_schedule` stores each stage's
// actions as a DenseI64ArrayAttr of (kind, local chunk, micro-batch)
// triples; these helpers read and write that encoding.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_LOOM_IR_PIPELINEACTIONS_H
#define LOOM_DIALECTS_LOOM_IR_PIPELINEACTIONS_H

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <string>

namespace mlir::loom {

/// One action of a stage: the forward or backward of the stage's local
/// chunk `chunk` (global chunk chunk * stages + stage) on `microbatch`.
struct PipelineAction {
  bool backward = false;
  int64_t chunk = 0;
  int64_t microbatch = 0;

  bool operator==(const PipelineAction &o) const {
    return backward == o.backward && chunk == o.chunk &&
           microbatch == o.microbatch;
  }
  /// `F3`, `B3` or, when the stage holds several chunks, `F3.1`.
  std::string str(bool withChunk) const {
    std::string s = (backward ? "B" : "F") + std::to_string(microbatch);
    if (withChunk)
      s += "." + std::to_string(chunk);
    return s;
  }
};

/// Actions as stored: 3 integers each (0 = forward / 1 = backward, local
/// chunk, micro-batch).
inline llvm::SmallVector<PipelineAction>
decodePipelineActions(DenseI64ArrayAttr attr) {
  llvm::SmallVector<PipelineAction> actions;
  ArrayRef<int64_t> v = attr.asArrayRef();
  for (size_t i = 0; i + 2 < v.size(); i += 3)
    actions.push_back({v[i] != 0, v[i + 1], v[i + 2]});
  return actions;
}

inline DenseI64ArrayAttr
encodePipelineActions(MLIRContext *ctx, ArrayRef<PipelineAction> actions) {
  llvm::SmallVector<int64_t> v;
  for (const PipelineAction &a : actions) {
    v.push_back(a.backward ? 1 : 0);
    v.push_back(a.chunk);
    v.push_back(a.microbatch);
  }
  return DenseI64ArrayAttr::get(ctx, v);
}

} // namespace mlir::loom

#endif // LOOM_DIALECTS_LOOM_IR_PIPELINEACTIONS_H
