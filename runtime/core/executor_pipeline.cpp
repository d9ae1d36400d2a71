//===- executor_pipeline.cpp - Executor on a pipeline stage -----*- C++ -*-===//
//
// A pipeline stage (Stage.pipeline) runs its actions instead of one
// instruction list: each micro-batch's tokens and targets are loaded before
// each of its actions, a forward's stash is kept in a spare of buffer memory
// until its backward reads it, and the loss is summed over `pp`.
// trainStep (executor_step.cpp) calls trainStepPipelined; evaluatePipelined
// runs an evaluation's forward actions.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/executor.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

namespace loom {

using program::DType;

bool Executor::isPipelined() const { return stageTable->pipeline() != nullptr; }

Status Executor::trainStepPipelined(const int32_t *inputs,
                                    const int32_t *targets,
                                    TrainStepResult &result,
                                    std::vector<InstructionTiming> *timings) {
  const program::Pipeline &pipe = *stageTable->pipeline();
  const int64_t M = stageTable->microbatches();
  const int64_t rows = localBatch() / M;
  // Stashed activations of the micro-batches in flight, by (chunk, mb): a
  // spare of buffer memory each (device-to-device copies, no host round
  // trip), returned to the spares when the backward has read it.
  struct Stashed {
    uint8_t *data = nullptr;
    uint64_t bytes = 0;
  };
  std::map<std::pair<uint32_t, uint32_t>, Stashed> stash;
  // Whatever is still stashed when the step ends (an error midway) goes
  // back to the spares, not astray.
  struct ReturnStashes {
    Executor &ex;
    std::map<std::pair<uint32_t, uint32_t>, Stashed> &held;
    ~ReturnStashes() {
      for (auto &entry : held)
        ex.returnSpare(entry.second.bytes, entry.second.data);
    }
  } returnStashes{*this, stash};
  int64_t stashBytes = 0; // held in `stash` now
  result.stashPeakBytes = 0;
  double lossSum = 0;
  // Forwards that produce a loss: at most one per (chunk, micro-batch).
  const int64_t lossCapacity = static_cast<int64_t>(pipe.actions()->size());
  int64_t lossCount = 0;
  const int64_t start = steadyNowNs();
  recvWaitNs = 0;
  for (const program::PipelineAction *a : *pipe.actions()) {
    const program::PipelineChunk &chunk = *pipe.chunks()->Get(a->chunk());
    const uint32_t mb = a->microbatch();
    // 1. The micro-batch's tokens and targets, when this stage reads them.
    LOOM_RETURN_IF_ERROR(copyMicrobatchIn(inputs, targets, mb * rows, rows));
    const auto key = std::make_pair(a->chunk(), mb);
    if (!a->backward()) {
      // 2. Forward; keep what the backward needs, and the loss.
      LOOM_RETURN_IF_ERROR(runList(chunk.forward(), false, mb, timings,
                                   static_cast<int32_t>(a->chunk()), false,
                                   /*flush=*/false));
      Stashed &kept = stash[key];
      if (chunk.stash_out())
        for (uint32_t b : *chunk.stash_out())
          kept.bytes += bufferBytes(b);
      if (kept.bytes > 0) {
        LOOM_RETURN_IF_ERROR(
            takeSpare(kept.bytes, kept.data, /*countInPeak=*/false));
        uint64_t at = 0;
        for (uint32_t b : *chunk.stash_out()) {
          LOOM_RETURN_IF_ERROR(
              memory->copy(kept.data + at, bufferData(b), bufferBytes(b)));
          at += bufferBytes(b);
        }
      }
      stashBytes += static_cast<int64_t>(kept.bytes);
      result.stashPeakBytes = std::max(result.stashPeakBytes, stashBytes);
      if (chunk.loss() >= 0) {
        // Kept on the device; read back once after the schedule.
        float *slot = nullptr;
        LOOM_RETURN_IF_ERROR(lossSlot(lossCount, lossCapacity, slot));
        LOOM_RETURN_IF_ERROR(
            memory->copy(slot, bufferData(static_cast<uint32_t>(chunk.loss())),
                         sizeof(float)));
        ++lossCount;
      }
      continue;
    }
    // 3. Backward, from the micro-batch's stash.
    auto it = stash.find(key);
    LOOM_CHECK(it != stash.end(), "stage " << stageTable->index()
                                           << ": backward of micro-batch "
                                           << mb << " before its forward");
    uint64_t at = 0;
    if (chunk.stash_in())
      for (uint32_t b : *chunk.stash_in()) {
        LOOM_CHECK(at + bufferBytes(b) <= it->second.bytes,
                   "stage " << stageTable->index()
                            << ": the backward of micro-batch " << mb
                            << " reads more stashed bytes than its forward "
                               "kept");
        LOOM_RETURN_IF_ERROR(
            memory->copy(bufferData(b), it->second.data + at, bufferBytes(b)));
        at += bufferBytes(b);
      }
    stashBytes -= static_cast<int64_t>(it->second.bytes);
    returnSpare(it->second.bytes, it->second.data);
    stash.erase(it);
    LOOM_RETURN_IF_ERROR(runList(chunk.backward(), false, mb, timings,
                                 static_cast<int32_t>(a->chunk()), true,
                                 /*flush=*/false));
  }
  LOOM_RETURN_IF_ERROR(comm->flush());
  LOOM_RETURN_IF_ERROR(sumLossSlots(lossCount, lossSum));
  result.pipelineNs = steadyNowNs() - start;
  result.pipelineWaitNs = recvWaitNs;
  // 4. The loss lives on the last stage: sum it over the pipeline.
  float loss = static_cast<float>(lossSum);
  for (uint32_t a = 0; a < comm->mesh().size(); ++a)
    if (comm->mesh()[a].name == "pp" && comm->mesh()[a].size > 1)
      LOOM_RETURN_IF_ERROR(comm->allReduceHost(&loss, 1, DType::F32,
                                               program::Reduction::Sum, {a}));
  result.loss = loss / static_cast<float>(M);
  return Status::success();
}

Status Executor::evaluatePipelined(const int32_t *inputs,
                                   const int32_t *targets,
                                   TrainStepResult &result,
                                   std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(isPipelined() && !isTraining(),
             "stage " << stageTable->index()
                      << " is not an evaluation's pipeline stage (a "
                         "pipeline stage without update_instructions)");
  const int64_t M = stageTable->microbatches();
  const int64_t rows = localBatch() / M, T = modelInfo->seq();
  LOOM_RETURN_IF_ERROR(checkMicrobatchBuffers(rows, T));
  // The forward actions alone: nothing is stashed (the chunks keep
  // nothing), the loss is summed over the pipeline.
  LOOM_RETURN_IF_ERROR(trainStepPipelined(inputs, targets, result, timings));
  result.gradNorm = std::numeric_limits<float>::quiet_NaN();
  return Status::success();
}

} // namespace loom
