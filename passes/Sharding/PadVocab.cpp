//===- PadVocab.cpp - Pad unsplit embedding tables --------------*- C++ -*-===//
//
// --loom-pad-vocab: Megatron-LM's --make-vocab-size-divisible-by when tensor
// parallelism does not split the vocabulary (tp = 1; with tp > 1
// --loom-tensor-parallel pads). GPT-2's 50257-row table becomes 50304 rows,
// so the tied LM head's logits rows are 16-byte aligned and cuBLASLt runs
// its fast kernels on the three LM-head GEMMs; VocabPadding.h does the
// retyping and the loss masking.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "passes/Passes.h"
#include "passes/Sharding/VocabPadding.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMPADVOCAB
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

struct LoomPadVocabPass : mlir::loom::impl::LoomPadVocabBase<LoomPadVocabPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const int64_t divisibleBy = vocabDivisibleBy;
    if (divisibleBy < 1) {
      module.emitError() << "loom-pad-vocab: vocab-divisible-by must be >= 1, "
                            "got "
                         << divisibleBy;
      return signalPassFailure();
    }
    // The parameters an embedding reads as its table, once each.
    llvm::MapVector<StringAttr, int64_t> tables;
    module.walk([&](EmbeddingOp embedding) {
      auto arg = functionArgumentOf(embedding.getTable());
      if (!arg)
        return;
      auto [func, index] = *arg;
      auto name =
          func.getArgAttrOfType<StringAttr>(index, LoomDialect::kNameAttr);
      auto type = dyn_cast<RankedTensorType>(embedding.getTable().getType());
      if (name && type && type.getRank() >= 1 &&
          !func.getArgAttr(index, LoomDialect::kUnpaddedRowsAttr))
        tables.insert({name, type.getDimSize(0)});
    });
    const std::string remedy =
        llvm::formatv("to a multiple of vocab-divisible-by = {0}; pass "
                      "--vocab-divisible-by 1 to keep the vocabulary unpadded",
                      divisibleBy);
    for (auto [name, rows] : tables)
      if (failed(padParameterRows(module, name, rows,
                                  paddedRows(rows, 1, divisibleBy), remedy)))
        return signalPassFailure();
  }
};

} // namespace
