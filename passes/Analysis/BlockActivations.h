//===- BlockActivations.h - Block activations and TP traffic ----*- C++ -*-===//
//
// What one transformer block costs a rank between its forward and its
// backward, and what tensor parallelism sends for it: the figures of
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models", Sec. 4) and Megatron-LM's per-block all-reduces,
// next to what Loom's compiled graph actually keeps and sends.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_ANALYSIS_BLOCKACTIVATIONS_H
#define LOOM_PASSES_ANALYSIS_BLOCKACTIVATIONS_H

#include "dialects/Loom/IR/LoomOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::loom {

/// One value a block's backward reads from its forward.
struct KeptActivation {
  std::string what;           // "h.0.attn.c_attn" (the defining op), "input"
  std::vector<int64_t> shape; // local shape on this rank
  int64_t bytes = 0;
  bool input = false; // an input of the forward block, not one of its results
};

/// Per-rank collectives of one kind on the tensor-parallel axis inside a
/// block (one micro-batch).
struct BlockCollectives {
  int64_t calls = 0;
  int64_t elements = 0;  // summed over the calls (the full buffers)
  int64_t sentBytes = 0; // ring-counted, as the runtime counts
};

/// The figures of one transformer block.
struct BlockActivationFigures {
  std::string block;           // the forward block's label, "h.0"
  int64_t blocks = 0;          // forward blocks in the step
  int64_t s = 0, b = 0, h = 0; // sequence, micro-batch per dp rank, hidden
  int64_t a = 0, t = 1;        // heads, tensor-parallel size
  std::string tpAxis;          // "" without a tensor-parallel axis
  /// Bytes of one activation value as compiled: 4 (fp32), or 2 in bf16
  /// mixed precision (--loom-mixed-precision).
  int64_t valueBytes = 4;
  /// An embedding table padded for tensor parallelism: name, real and
  /// padded rows (loom.unpadded_rows); empty name when none.
  std::string paddedTable;
  int64_t unpaddedRows = 0, paddedRows = 0;

  /// Korthikanti et al.'s bytes per block with `valueBytes`-byte values and
  /// 1-byte dropout masks (`valueBytes` = 2 is the paper's convention):
  /// sbh(16e+2) + as²b(2e+1) without parallelism, of which sbh(4e+2) stays
  /// whole under tensor parallelism (layer-norm inputs, the inputs of QKV
  /// and of the first MLP linear, two dropout masks).
  double paperNone(int valueBytes) const;
  double paperTensorParallel(int valueBytes) const;
  double paperSequenceParallel(int valueBytes) const;
  /// Selective recomputation (the a·s² part recomputed) with TP + SP.
  double paperSelective(int valueBytes) const;
  /// The paper's accounting with Loom's model: values of valueBytes, no
  /// dropout masks, the a·s² scores recomputed in the backward:
  /// sbh(16 + 48/t) in fp32, sbh(8 + 24/t) in 16 bits (with the GELU
  /// recomputed, 4h/t values fewer: sbh(16 + 32/t), sbh(8 + 16/t)), plus
  /// the fp32 log-sum-exp the flash backward reads, one per row and head:
  /// 4sab/t.
  double expectedLoom() const;

  /// What Loom keeps: the forward's values its backward block reads (this
  /// rank, local shapes); no entries when the step has no backward.
  std::vector<KeptActivation> kept;
  int64_t keptBytes() const;
  /// Full recomputation (--loom-recompute=mode=full): the backward reads
  /// only the forward's input and re-runs the forward's body.
  bool fullRecompute = false;
  /// Selective recomputation (--loom-recompute=mode=selective): the
  /// backward re-runs the MLP's GELU instead of reading its output.
  bool geluRecomputed = false;

  /// Collectives on the tp axis in the forward and the backward block.
  BlockCollectives forwardAllReduce, backwardAllReduce;
  BlockCollectives forwardOther, backwardOther; // all-gather, reduce-scatter
  /// Megatron's per-block volume: b·s·h elements per all-reduce, of
  /// valueBytes each.
  int64_t allReduceElements() const { return b * s * h; }
  /// Bytes one rank sends per block for 2 + 2 all-reduces of b·s·h
  /// elements on a ring of t: 4 · 2(t-1)/t · bsh · valueBytes; with
  /// sequence parallelism 4 all-gathers + 4 reduce-scatters of
  /// (t-1)/t · bsh · valueBytes each, the same.
  int64_t megatronSentBytes() const;
};

/// The figures of the first transformer block of `module` (a forward
/// `loom.block` with the model's `loom.model` shape), or std::nullopt when
/// the module has no such block or no model configuration.
std::optional<BlockActivationFigures> measureBlockActivations(ModuleOp module);

/// Prints the figures as the report's text section.
void printBlockActivations(const BlockActivationFigures &fig, raw_ostream &os);

/// The figures as the report's JSON object.
llvm::json::Object blockActivationsToJson(const BlockActivationFigures &fig);

} // namespace mlir::loom

#endif // LOOM_PASSES_ANALYSIS_BLOCKACTIVATIONS_H
