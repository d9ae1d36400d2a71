//===- executor.h - Runs one stage of a verified program --------*- C++ -*-===//
//
// The executor owns one rank's arena (a single 64-byte aligned allocation of
// the stage's arena_bytes from its BufferMemory, buffer_memory.h; buffers
// are views at the offsets the compiler's
// buffer planner chose), initializes the parameters deterministically
// (param_init.h: values depend only on seed + name + global index, so every
// partitioning starts from the same model) and runs the instruction stream
// with the fp32 CPU kernels; for a training program, trainStep() runs the
// micro-batches and the optimizer update. The program must have been loaded by
// loadProgramFile / loadProgramBytes, which verified every index and shape the
// executor relies on.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_EXECUTOR_H
#define LOOM_RUNTIME_CORE_EXECUTOR_H

#include "runtime/core/adamw_groups.h"
#include "runtime/core/bf16_staging.h"
#include "runtime/core/buffer_memory.h"
#include "runtime/core/communicator.h"
#include "runtime/core/kernel_backend.h"
#include "runtime/core/status.h"
#include "runtime/program/program.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace loom {

/// When one instruction ran (steady clock, nanoseconds since its epoch).
struct InstructionTiming {
  /// Index into Stage.instructions, or Stage.update_instructions when
  /// `update` is set.
  uint32_t index = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
  /// The micro-batch (0-based) whose pass ran it (instructions only).
  uint32_t microbatch = 0;
  bool update = false;
  /// A pipeline stage's instruction: `index` is into the forward (or, with
  /// `backward`, the backward) list of Pipeline.chunks[chunk]; -1 otherwise.
  int32_t chunk = -1;
  bool backward = false;
  /// Instructions the span covers from `index` on: more than one for an
  /// AdamW group (adamw_groups.h) or a fused span (gelu_epilogues.h,
  /// residual_norms.h, cross_entropy_fusion.h), which run as one call.
  uint32_t count = 1;
};

/// What one training step reports.
struct TrainStepResult {
  /// Mean of the micro-batch losses (the forward before the update).
  float loss = 0;
  /// Global gradient norm before clipping (Stage.grad_norm; NaN if absent).
  float gradNorm = 0;
  /// A pipeline stage: how long its actions took (the micro-batch phase)
  /// and how much of it the stage waited for its neighbours (receives).
  int64_t pipelineNs = 0;
  int64_t pipelineWaitNs = 0;
  /// A pipeline stage: the most bytes of stashed activations it held at
  /// once (Pipeline.predicted_stash_peak_bytes predicts it).
  int64_t stashPeakBytes = 0;
};

/// A parameter of the stage, as the executor holds it.
struct ParamView {
  std::string name;
  std::vector<int64_t> globalShape;
  /// Param.checkpoint_shape: the shape checkpoints hold (the same row-major
  /// elements as globalShape, grouped as in HF's layout).
  std::vector<int64_t> checkpointShape;
  /// Param.unpadded_rows: the real rows of a parameter padded at the end of
  /// dimension 0 (then checkpointShape is globalShape with those rows); 0
  /// when not padded.
  int64_t unpaddedRows = 0;
  std::vector<int64_t> sliceOffset;
  std::vector<int64_t> localShape;
  uint32_t buffer = 0;
  /// Param.sharding: per dimension the mesh axes splitting it (all empty
  /// when the parameter is not sharded).
  std::vector<std::vector<uint32_t>> sharding;
  bool sharded() const {
    for (const auto &axes : sharding)
      if (!axes.empty())
        return true;
    return false;
  }
  /// ZeRO: Param.grad_sharding / moment_sharding (empty: like the
  /// parameter; then the buffers have localShape).
  std::vector<std::vector<uint32_t>> gradSharding;
  std::vector<std::vector<uint32_t>> momentSharding;
  /// Training buffers (Param.grad_buffer / m_buffer / v_buffer), -1 if none.
  int32_t gradBuffer = -1;
  int32_t mBuffer = -1;
  int32_t vBuffer = -1;
  /// Mixed precision (Param.master_buffer): the fp32 master weights of a
  /// BF16 parameter, with the m buffer's shape and moment sharding; -1 if
  /// none. Checkpoints save and load it in place of `buffer`.
  int32_t masterBuffer = -1;
};

/// Steady-clock nanoseconds (the time base of InstructionTiming).
int64_t steadyNowNs();

class Executor {
public:
  /// Allocates the arena of the stage whose index is `stageIndex`, zeroes it
  /// and initializes every parameter from `seed` (a sharded parameter gets
  /// its block of the global tensor, by global index). `comm` (not owned;
  /// must outlive the executor) runs the collectives and is laid out over
  /// Program.mesh; nullptr: a SingleRankCommunicator of the executor's own.
  /// Errors when the stage does not exist, the arena cannot be allocated or
  /// the mesh's device count differs from the communicator's size.
  /// `kernels` / `memory`: the backend the instructions run on and the
  /// memory the arena and temporaries live in (nullptr: cpu::CpuKernels /
  /// cpu::HostMemory); the kernels must accept the memory's pointers.
  /// `start` ParamStart::Loaded skips the initialization (parameters and
  /// masters stay zero) for a caller that loads every parameter next, as
  /// loadCheckpoint does: GPT-2 124M's init is seconds of CPU time.
  enum class ParamStart { Seeded, Loaded };
  static Status create(const program::LoadedProgram &program,
                       uint32_t stageIndex, uint64_t seed,
                       std::unique_ptr<Executor> &out,
                       Communicator *comm = nullptr,
                       std::unique_ptr<KernelBackend> kernels = nullptr,
                       std::unique_ptr<BufferMemory> memory = nullptr,
                       ParamStart start = ParamStart::Seeded);
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// Runs the instruction stream once. When `timings` is non-null, appends one
  /// entry per instruction. Errors (naming the instruction) when a kernel
  /// rejects its data, e.g. a token id outside the embedding table. For a
  /// training program this is one micro-batch's forward + backward +
  /// gradient accumulation (the caller zeroes the gradients).
  Status run(std::vector<InstructionTiming> *timings = nullptr);

  /// True when the stage has update_instructions (a training program).
  bool isTraining() const;

  /// Sets every Param.grad_buffer to zero (BufferMemory::fillZero).
  Status zeroGradients();

  /// Writes `lr` and the 1-based `step` (as f32) into the stage's lr / step
  /// scalars and runs update_instructions once.
  Status runUpdate(int64_t step, float lr,
                   std::vector<InstructionTiming> *timings = nullptr);

  /// True when the stage is a pipeline stage (Stage.pipeline).
  bool isPipelined() const;

  /// One training step (DESIGN.md §5): zero the gradients; for micro-batch i
  /// of M = Stage.microbatches copy rows [i*b, (i+1)*b) of `inputs` and
  /// `targets` (this rank's localBatch() x model.seq tokens, b =
  /// localBatch() / M)
  /// into the tokens / targets buffers, run the instructions and add up the
  /// loss; then runUpdate(step, lr). `step` is 1-based (AdamW's t).
  /// A pipeline stage runs its actions instead (each micro-batch's tokens
  /// and targets loaded before each of its actions, forward stashes kept
  /// per micro-batch in flight), then all-reduces the loss over `pp`.
  Status trainStep(const int32_t *inputs, const int32_t *targets, int64_t step,
                   float lr, TrainStepResult &result,
                   std::vector<InstructionTiming> *timings = nullptr);

  /// One evaluation step of an evaluation's pipeline stage (a pipeline
  /// stage without update_instructions): the stage's forward actions on
  /// the Stage.microbatches micro-batches of `inputs` / `targets` (as
  /// trainStep), then the loss all-reduced over `pp` and divided by the
  /// micro-batch count: the mean loss over the whole batch, on every stage.
  /// `result.gradNorm` is NaN.
  Status evaluatePipelined(const int32_t *inputs, const int32_t *targets,
                           TrainStepResult &result,
                           std::vector<InstructionTiming> *timings = nullptr);

  /// One step of an unpipelined evaluation program: checks and copies
  /// this rank's localBatch() x model.seq `inputs` / `targets` into the
  /// tokens / targets buffers, runs the instructions and reads the loss.
  /// Token and target ids are checked on the host (0 <= id < vocab_size)
  /// before they reach buffer memory, as in trainStep: a device kernel
  /// cannot report a bad id.
  Status evaluate(const int32_t *inputs, const int32_t *targets, float &loss,
                  std::vector<InstructionTiming> *timings = nullptr);

  /// The loss of the weights as they are now on one batch (`inputs` /
  /// `targets` as for trainStep), whatever the program: an evaluation
  /// program's step (evaluate / evaluatePipelined); for a training program
  /// its forward alone, as Megatron's forward_only evaluation runs the
  /// training model: each micro-batch's instructions up to the last that
  /// writes Stage.loss (in program order every value the loss depends on
  /// comes before it; collectives still in flight complete there), or a
  /// pipeline stage's forward actions, each micro-batch's stash slot given
  /// back right after its forward. The mean over the micro-batches (and,
  /// pipelined, all-reduced over `pp`), as trainStep reports it. Nothing the
  /// next step reads survives it: the micro-batch instructions never write
  /// weights, master weights or moments (the update does) and trainStep
  /// zeroes the gradient accumulators first. No timings (validation is not
  /// part of a step's trace).
  Status evaluateLoss(const int32_t *inputs, const int32_t *targets,
                      float &loss);

  /// Rows of the global batch this rank reads: model.batch / (size of the
  /// mesh axis named "dp", 1 if none).
  int64_t localBatch() const;

  /// The communicator collectives run on (the caller's or the executor's own).
  Communicator &communicator() const { return *comm; }

  const program::Stage &stage() const { return *stageTable; }
  const program::ModelInfo &model() const { return *modelInfo; }
  const std::vector<ParamView> &params() const { return paramViews; }

  /// The memory the arena lives in (host code reads and writes buffers only
  /// through it, or through copyToBuffer / copyFromBuffer).
  BufferMemory &bufferMemory() const { return *memory; }
  /// Host bytes into / out of buffer `index` (the first `bytes` of it;
  /// errors when it is smaller).
  Status copyToBuffer(uint32_t index, const void *host, uint64_t bytes);
  Status copyFromBuffer(uint32_t index, void *host, uint64_t bytes) const;
  /// Bytes of buffer `index` (element count x dtype size).
  uint64_t bufferBytes(uint32_t index) const;

  /// Buffer pointer (an address in bufferMemory(), not to be dereferenced
  /// by the host unless it is host memory), shape, element count and dtype
  /// of buffer `index` (< number of buffers in the stage). A pipeline
  /// chunk's stash buffer (Buffer.stash) has bytes only while one of that
  /// chunk's actions runs, in its micro-batch's slot: nullptr otherwise.
  void *bufferData(uint32_t index);
  const void *bufferData(uint32_t index) const;
  const std::vector<int64_t> &bufferShape(uint32_t index) const {
    return shapes[index];
  }
  int64_t bufferNumel(uint32_t index) const;
  program::DType bufferDType(uint32_t index) const;
  uint32_t numBuffers() const { return static_cast<uint32_t>(shapes.size()); }

  /// The scalar loss after run() (read through the buffer memory). Errors
  /// when the stage has no loss buffer.
  Status readLoss(float &loss) const;

  /// Bytes of the model state this rank holds: every parameter's buffer and
  /// its gradient and AdamW moment buffers (local shapes), each buffer once.
  /// What --loom-report predicts as model_state_bytes.
  int64_t modelStateBytes() const;

  /// Bytes of the arena.
  uint64_t arenaBytes() const { return arenaSize; }
  /// Bytes the runtime has held for tensors at peak: the arena plus the
  /// temporaries it allocated (staging for in-place ops, kernel workspace the
  /// program did not plan, the bf16 staging memory).
  uint64_t peakTensorBytes() const;
  /// Bytes of the staging memory in which instructions with BF16 operands
  /// run their fp32 kernels (bf16_staging.h): allocated at load, the most
  /// any one instruction needs; 0 for an all-fp32 program.
  uint64_t bf16StagingBytes() const { return bf16StagingSize; }
  /// Bytes the kernel backend holds for itself beside the tensors
  /// (KernelBackend::workspaceBytes: cuBLASLt's workspace, the CUDA bf16
  /// kernels' buffers; 0 on the CPU): not in peakTensorBytes.
  uint64_t kernelWorkspaceBytes() const { return kernels->workspaceBytes(); }
  /// What the kernels chose for themselves so far
  /// (KernelBackend::kernelChoices).
  std::vector<std::string> kernelChoices() const {
    return kernels->kernelChoices();
  }

private:
  Executor() = default;
  Status
  runList(const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>>
              *list,
          bool update, uint32_t microbatch,
          std::vector<InstructionTiming> *timings, int32_t chunk = -1,
          bool backward = false, bool flush = true, uint32_t end = UINT32_MAX);
  /// How many leading instructions of a training stage's micro-batch list
  /// compute its loss: one past the last writing Stage.loss (evaluateLoss).
  Status forwardInstructionCount(uint32_t &count) const;
  /// The tokens / targets buffers (when this stage has them) hold one
  /// micro-batch of `rows` x `T` ids.
  Status checkMicrobatchBuffers(int64_t rows, int64_t T) const;
  /// A pipeline stage's actions on one batch; with `forwardOnly` its
  /// forward actions alone, each stash slot given back after its forward
  /// (an evaluation, or evaluateLoss of a training stage).
  Status trainStepPipelined(const int32_t *inputs, const int32_t *targets,
                            TrainStepResult &result,
                            std::vector<InstructionTiming> *timings,
                            bool forwardOnly = false);
  Status runInstruction(const program::Instruction &ins);
  /// The instructions of `group` (from `list`) in one
  /// KernelBackend::adamwGroup call, once collectives in flight on their
  /// buffers have completed.
  Status runAdamWGroup(
      const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>>
          &list,
      const AdamWGroupPlan &group);
  /// Adjacent instructions of the micro-batch list a backend runs as one
  /// call: a GEMM and its GELU (gelu_epilogues.h), a residual Add and a
  /// layer norm (residual_norms.h), a loss and its gradient, the seed's
  /// Fill between them (cross_entropy_fusion.h).
  enum class FusedKind {
    LinearGelu,
    LinearGradGelu,
    AddLayerNorm,
    LayerNormGradAdd,
    CrossEntropyWithGrad
  };
  struct FusedSpan {
    FusedKind kind;
    /// Instructions from the first on (2, or 3 with the seed's Fill).
    uint32_t count = 2;
    /// The first instruction's result is read by nothing but the last
    /// (PairAt::firstResultUnread): LinearGelu need not write its
    /// pre-activation.
    bool firstResultUnread = false;
  };
  /// Instructions [first, first + span.count) of `list` in one KernelBackend
  /// call of the span's kind; `ran` false: the backend declined the span
  /// and nothing ran but instructions the call needs to have run before it
  /// (the seed's Fill), which may run again.
  Status runFusedSpan(
      const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>>
          &list,
      uint32_t first, const FusedSpan &span, bool &ran);
  /// `ins` with BF16 operands on a backend that runs it on bf16 itself
  /// (KernelBackend::runBF16Natively), overlapping outputs staged.
  Status runBF16Natively(const program::Instruction &ins,
                         const std::vector<uint32_t> &in,
                         const std::vector<uint32_t> &out,
                         const std::vector<uint32_t> &scr);
  /// Checks `count` ids on the host and copies them into `buffer` (nothing
  /// when -1); `what` ("token" / "target") and `firstRow` name a bad id.
  Status copyTokensIn(int32_t buffer, const int32_t *ids, int64_t count,
                      const char *what, int64_t firstRow);
  /// The tokens and targets of `rows` rows from row `firstRow` of this
  /// rank's batch (a micro-batch) into the stage's token and target
  /// buffers, through copyTokensIn.
  Status copyMicrobatchIn(const int32_t *inputs, const int32_t *targets,
                          int64_t firstRow, int64_t rows);
  /// A buffer-memory temporary of exactly `bytes` from the spares (kept
  /// until the executor goes; counted in peakTensorBytes unless
  /// `countInPeak` is false: a pipeline's stashes, which have their own
  /// figure, TrainStepResult::stashPeakBytes), and back.
  Status takeSpare(uint64_t bytes, uint8_t *&base, bool countInPeak = true);
  void returnSpare(uint64_t bytes, uint8_t *base);
  /// The mesh axes an instruction's collective (or LocalSlice) runs over.
  static std::vector<uint32_t> axesOf(const program::Instruction &ins);
  Status runCollective(const program::Instruction &ins,
                       const std::vector<uint32_t> &in,
                       const std::vector<uint32_t> &out,
                       const std::vector<uint32_t> &scr, void *dst);
  /// The outputs of a bucket, filled in order from the consecutive values
  /// at `from` (an all-reduce's or reduce-scatter's received buffer).
  Status unpackConsecutive(const void *from, const std::vector<uint32_t> &out,
                           int64_t elemBytes);
  /// AllReduce of one value or a packed bucket, now or (async_collective)
  /// started and left in flight.
  Status runAllReduce(const program::Instruction &ins,
                      const std::vector<uint32_t> &in,
                      const std::vector<uint32_t> &out,
                      const std::vector<uint32_t> &scr);
  /// A last-micro-batch ReduceScatter, in place: this rank's block of the
  /// input reduced over the group into scratch[0] (from the packed copy in
  /// scratch[1] for a non-leading dimension), then written back over the
  /// input as its block with zeros elsewhere; now, or on completion
  /// (async_collective).
  Status runReduceScatterInPlace(const program::Instruction &ins,
                                 const std::vector<uint32_t> &in,
                                 const std::vector<uint32_t> &scr);
  /// A ReduceScatter of several values (ZeRO-2/3's bucket of a block's
  /// gradients): every member's blocks packed rank by rank into scratch[1],
  /// reduce-scattered into scratch[0] and unpacked into the outputs; now,
  /// or on completion (async_collective). The inputs are free once packed.
  /// In the last micro-batch only (ZeRO-1's accumulators, in place), each
  /// member's block is written back over its input instead, zeros in the
  /// other blocks, as runReduceScatterInPlace does for one.
  Status runReduceScatterBucket(const program::Instruction &ins,
                                const std::vector<uint32_t> &in,
                                const std::vector<uint32_t> &out,
                                const std::vector<uint32_t> &scr);
  /// An AllGather of several values (ZeRO-3's bucket of a block's
  /// parameters): this rank's shards packed into scratch[0], every rank's
  /// gathered into scratch[1] and each output assembled from its member's
  /// shards; now, or on completion (async_collective).
  Status runAllGatherBucket(const program::Instruction &ins,
                            const std::vector<uint32_t> &in,
                            const std::vector<uint32_t> &out,
                            const std::vector<uint32_t> &scr);
  /// Completes the in-flight all-reduces whose bytes `ins` touches (reads,
  /// writes or uses as scratch), or all of them when `ins` is null.
  Status completeInFlight(const program::Instruction *ins);
  /// A grow-only temporary in buffer memory (counts in floats); what it
  /// held does not survive growing.
  struct TempPool {
    uint8_t *data = nullptr;
    uint64_t size = 0, capacity = 0;
  };
  /// `count` floats of `pool`; throws std::runtime_error (which runList
  /// reports with the instruction) when buffer memory is exhausted.
  float *temp(TempPool &pool, int64_t count);
  /// The scratch the kernels' attention forward or gradient needs
  /// (KernelBackend::attentionScratchFloats): the planned `scr` when it
  /// holds it (the forward's [B,NH,T]), else a workspace temporary; null
  /// when they need none.
  float *attentionScratch(int64_t B, int64_t T, int64_t C, int64_t NH,
                          bool grad, bool saved,
                          const std::vector<uint32_t> &scr);

  const program::Stage *stageTable = nullptr;
  const program::ModelInfo *modelInfo = nullptr;
  uint8_t *arena = nullptr;
  uint64_t arenaSize = 0;
  /// The stash slot of the pipeline action running now (its Buffer.stash
  /// buffers live there); null outside a chunk's action.
  uint8_t *stashSlot = nullptr;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<ParamView> paramViews;
  /// fp32 slots for the BF16 operands of one instruction (bf16_staging.h),
  /// in buffer memory.
  /// The staging plan of every instruction with BF16 operands (made at
  /// load; instructions without one run on their buffers as they are).
  std::unordered_map<const program::Instruction *, BF16StagingPlan> bf16Plans;
  /// The update list's AdamW groups by their first instruction (made at
  /// load when the kernels group AdamW updates; empty otherwise).
  std::unordered_map<const program::Instruction *, AdamWGroupPlan> adamwGroups;
  /// The micro-batch list's fused spans by their first instruction (made
  /// at load for the kinds the kernels fuse; a span the backend declines
  /// is dropped when it first runs).
  std::unordered_map<const program::Instruction *, FusedSpan> fusedSpans;
  uint8_t *bf16Staging = nullptr;
  uint64_t bf16StagingSize = 0;
  // Temporaries (grow only): staging for outputs that overlap inputs, and
  // kernel workspace (mean/rstd, attention probabilities, per-token losses)
  // when the program gives no scratch buffer.
  // One staging pool per output position (multi-output gradient ops).
  std::vector<TempPool> staging;
  TempPool workspace, workspace2;
  /// One float per micro-batch: each micro-batch's loss is copied here in
  /// buffer memory and all are read back once per step (one host round
  /// trip per step on a device, not one per micro-batch). A few bytes, not
  /// counted in peakTensorBytes.
  uint8_t *lossSlots = nullptr;
  int64_t lossSlotCount = 0;
  /// Slot `i` of lossSlots (grown to `count` first).
  Status lossSlot(int64_t i, int64_t count, float *&slot);
  /// The sum, in micro-batch order, of the first `count` slots.
  Status sumLossSlots(int64_t count, double &sum);
  Communicator *comm = nullptr;
  std::unique_ptr<Communicator> ownComm;
  /// The memory the arena lives in (cpu::HostMemory); every host <-> arena
  /// copy of the executor goes through it. Declared before `kernels` so
  /// that it outlives them.
  std::unique_ptr<BufferMemory> memory;
  /// The kernels runInstruction calls (cpu::CpuKernels on the host arena).
  std::unique_ptr<KernelBackend> kernels;
  /// An asynchronous all-reduce in flight: the arena bytes it still owns
  /// (outputs, and the packed bucket) and, for a bucket, where each reduced
  /// value goes when it completes.
  struct InFlight {
    Communicator::Ticket ticket = -1;
    std::vector<program::BufferRange> busy;
    /// Runs on completion: unpack a bucket or a gathered non-leading dim
    /// (from a spare temporary it then returns).
    std::function<Status()> finish;
  };
  /// Bytes of buffer `b` (program::bufferRange: a stash buffer's after the
  /// arena's), to tell which buffers share bytes.
  program::BufferRange byteRange(uint32_t b) const;
  /// A bucket's collective about to start: its outputs and scratch busy,
  /// `unpack` on completion.
  InFlight bucketInFlight(const std::vector<uint32_t> &out,
                          const std::vector<uint32_t> &scr,
                          std::function<Status()> unpack) const;
  std::vector<InFlight> inFlight;
  /// Spare buffer-memory temporaries by size (takeSpare / returnSpare) and
  /// the bytes allocated for them.
  std::multimap<uint64_t, uint8_t *> spares;
  uint64_t spareBytes = 0;
  /// Nanoseconds spent blocked in Recv (a pipeline stage's wait).
  int64_t recvWaitNs = 0;
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_EXECUTOR_H
