//===- RankFigures.h - What one rank holds and sends per step ---*- C++ -*-===//
//
// The figures a user checks before launch and the runtime measures after:
// model state resident on a rank, the planned arena and the bytes each
// collective kind sends per step. Read off the partitioned IR once, here,
// for both `--loom-report` (printed) and the program emitter (stored in the
// program as predictions loom-run compares with what it counts).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_ANALYSIS_RANKFIGURES_H
#define LOOM_PASSES_ANALYSIS_RANKFIGURES_H

#include "dialects/Loom/IR/LoomOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlir::loom {

/// The collective kinds figures are kept for, in the runtime's CommKind
/// order and with its names.
inline constexpr const char *kCollectiveKinds[] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send"};

/// What one rank holds and sends.
struct RankFigures {
  /// Model state by role ("param", "grad", "adam_m", "adam_v", and "master"
  /// in mixed precision): bytes of the arguments with that role, local
  /// shapes and element types, each (role, name) once.
  std::map<std::string, int64_t> stateBytes;
  /// Local parameter elements.
  int64_t params = 0;
  /// Elements of the model's parameters (Φ, global shapes).
  int64_t globalParams = 0;
  /// Local elements by role, as stateBytes.
  std::map<std::string, int64_t> stateElements;
  /// The largest planned arena (loom.arena_bytes); -1 when nothing is
  /// planned.
  int64_t arenaBytes = -1;
  /// Per collective kind (every kCollectiveKinds entry present): bytes one
  /// rank sends per step, ring-counted with S the full buffer, and calls.
  std::map<std::string, int64_t> sentBytes;
  std::map<std::string, int64_t> calls;
  /// The same per `loom.block`, by label ("h.0" forward, "h.0.grad"
  /// backward; kinds with no collective absent), and the labels in program
  /// order: Megatron's per-block traffic (tensor and sequence parallelism).
  std::map<std::string, std::map<std::string, int64_t>> blockSentBytes,
      blockCalls;
  std::vector<std::string> blockLabels;
  /// What one execution of each phase of the step sends: the functions
  /// with that loom.train phase ("microbatch", "forward", "backward",
  /// "update"; "step" without one; "last microbatch" for a micro-batch's
  /// last_microbatch reductions), keyed by "<kind>[<axes>]" (e.g.
  /// "all_gather[dp]"), and how often the phase runs per step (the
  /// micro-batches, or 1). Over the phases, executions x bytes sum to
  /// sentBytes: this is where a step's traffic comes from (ZeRO-3's
  /// gathers in every forward and backward of a micro-batch, say).
  struct PhaseTraffic {
    int64_t executions = 1;
    std::map<std::string, int64_t> bytesPerExecution;
  };
  std::map<std::string, PhaseTraffic> phases;
  /// Ranks of the mesh and its axes as "dp=4 tp=2" ("" without a mesh).
  int64_t ranks = 1;
  std::string mesh;

  /// Sum of stateBytes over the roles.
  int64_t modelStateBytes() const;
  /// The model state this rank would hold in bf16 mixed precision (the
  /// ZeRO paper's accounting, with the same shardings): 2-byte parameters
  /// and gradients, and the fp32 optimizer state (master weights sharded
  /// like the moments, plus both moments) at 12 bytes per moment element.
  int64_t mixedPrecisionStateBytes() const;
  /// Whether the step is compiled in bf16 mixed precision (it holds fp32
  /// master weights: --loom-mixed-precision); mixedPrecisionStateBytes()
  /// then equals modelStateBytes() unless the gradients are fp32.
  bool isMixedPrecision() const { return stateElements.count("master"); }
  /// Bytes per gradient element (2 in bf16, 4 in fp32; 0 without
  /// gradients).
  int64_t gradElementBytes() const;
  /// Sum of sentBytes over the kinds.
  int64_t totalSentBytes() const;
};

/// Bytes one rank sends for one execution of the collective `op`,
/// ring-counted as the runtime counts them (nccl-tests: all-reduce
/// 2(n-1)/n·S, all-gather / reduce-scatter / all-to-all (n-1)/n·S with S
/// the full buffer; a send its buffer), and its kind ("all_reduce", ...);
/// {nullptr, 0} for any other op.
std::pair<const char *, int64_t> collectiveSentBytes(Operation *op);

/// The figures of `funcs` (the functions one rank runs, e.g. a training
/// step's micro-batch and update functions) on `mesh` (null: one rank).
/// A function's collectives count once per execution: the micro-batch
/// function's once per micro-batch (loom.train microbatches).
RankFigures measureRankFigures(ArrayRef<func::FuncOp> funcs, MeshOp mesh);

/// Bytes a pipeline stage sends per step when the runtime all-reduces the
/// step's loss (one f32) over the `stages` ranks of the pipeline axis
/// (program.fbs, Pipeline), ring-counted as an all_reduce.
inline int64_t pipelineLossReduceBytes(int64_t stages) {
  return stages <= 1 ? 0 : 2 * (stages - 1) * 4 / stages;
}

/// The figures of every defined function of `module` on its mesh.
RankFigures measureRankFigures(ModuleOp module);

} // namespace mlir::loom

#endif // LOOM_PASSES_ANALYSIS_RANKFIGURES_H
