//===- VocabPadding.h - Pad an embedding table's rows -----------*- C++ -*-===//
//
// Megatron-LM's `--make-vocab-size-divisible-by`: a vocabulary that tensor
// parallelism cannot split evenly is padded with rows that start at zero and
// never train, and the padded logits are masked out of the loss.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_VOCABPADDING_H
#define LOOM_PASSES_SHARDING_VOCABPADDING_H

#include "dialects/Loom/IR/LoomOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <optional>
#include <utility>

namespace mlir::loom {

/// The rows a table of `rows` rows gets when split `ways` ways: `rows` when
/// `ways` > 1 divides it, else the next multiple of `divisibleBy` x `ways`
/// (Megatron's rule, so every rank's block is a multiple of `divisibleBy`
/// rows). Unsplit (`ways` <= 1) that is the next multiple of `divisibleBy`,
/// as Megatron pads at tp = 1 too: GPT-2's 50257 rows become 50304, which
/// keeps the LM head's GEMMs on 16-byte-aligned rows (an odd row length
/// forces cuBLASLt onto its slow kernels). `divisibleBy` must be >= 1.
int64_t paddedRows(int64_t rows, int64_t ways, int64_t divisibleBy);

/// The function argument `v` is, seen through `loom.block` arguments (how
/// a parameter reaches the ops of a block); nullopt for any other value.
std::optional<std::pair<func::FuncOp, unsigned>> functionArgumentOf(Value v);

/// Pads dimension 0 of every argument of every function in `module` that
/// holds parameter `param` or its training state (gradient accumulator,
/// AdamW moments) from `rows` to `padded` rows, and with it every dimension
/// the ops' sharding rules tie to it (the logits' vocabulary, the table's
/// gradient, the optimizer's update), through `loom.block` bodies. The
/// parameter gets `loom.unpadded_rows` = `rows`; the loss ops reading padded
/// logits (VocabMaskOpInterface: the vocab-parallel pieces and the
/// whole-vocabulary `loom.cross_entropy`, with their gradients) get
/// `vocab_size` = `rows`, so the padding columns stay out of the maximum,
/// the sums and the gradient. Fails, with a
/// diagnostic on the op ending in `remedy` (why the padding, and what the
/// user can change: "for tensor parallelism; use ..."), when
/// an op needs the padded dimension whole or has no sharding rule to say
/// where it goes.
LogicalResult padParameterRows(ModuleOp module, StringAttr param, int64_t rows,
                               int64_t padded, StringRef remedy);

} // namespace mlir::loom

#endif // LOOM_PASSES_SHARDING_VOCABPADDING_H
