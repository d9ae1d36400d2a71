//===- executor_pipeline.cpp - Executor on a pipeline stage -----*- C++ -*-===//
//
// A pipeline stage (Stage.pipeline) runs its actions instead of one
// instruction list: each micro-batch's tokens and targets are loaded before
// each of its actions, a forward writes what its backward reads into a stash
// slot of its own (a spare of buffer memory, held until that backward is
// done), and the loss is summed over `pp`.
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
                                    std::vector<InstructionTiming> *timings,
                                    bool forwardOnly) {
  const program::Pipeline &pipe = *stageTable->pipeline();
  const int64_t M = stageTable->microbatches();
  const int64_t rows = localBatch() / M;
  // The stash slot of each micro-batch in flight, by (chunk, mb): a spare
  // of buffer memory the forward writes its kept activations into and the
  // backward reads them from, in place (Buffer.stash), returned to the
  // spares when that backward is done.
  struct Slot {
    uint8_t *data = nullptr;
    uint64_t bytes = 0;
  };
  std::map<std::pair<uint32_t, uint32_t>, Slot> slots;
  // Whatever is still in flight when the step ends (an error midway) goes
  // back to the spares, not astray, and no action's slot stays bound.
  struct ReturnSlots {
    Executor &ex;
    std::map<std::pair<uint32_t, uint32_t>, Slot> &held;
    ~ReturnSlots() {
      for (auto &entry : held)
        ex.returnSpare(entry.second.bytes, entry.second.data);
      ex.stashSlot = nullptr;
    }
  } returnSlots{*this, slots};
  int64_t stashBytes = 0; // held in `slots` now
  result.stashPeakBytes = 0;
  double lossSum = 0;
  // Forwards that produce a loss: at most one per (chunk, micro-batch).
  const int64_t lossCapacity = static_cast<int64_t>(pipe.actions()->size());
  int64_t lossCount = 0;
  const int64_t start = steadyNowNs();
  recvWaitNs = 0;
  for (const program::PipelineAction *a : *pipe.actions()) {
    if (forwardOnly && a->backward())
      continue;
    const program::PipelineChunk &chunk = *pipe.chunks()->Get(a->chunk());
    const uint32_t mb = a->microbatch();
    // 1. The micro-batch's tokens and targets, when this stage reads them.
    LOOM_RETURN_IF_ERROR(copyMicrobatchIn(inputs, targets, mb * rows, rows));
    const auto key = std::make_pair(a->chunk(), mb);
    if (!a->backward()) {
      // 2. Forward, into a stash slot of its own; keep the loss.
      Slot &slot = slots[key];
      slot.bytes = chunk.stash_bytes();
      if (slot.bytes > 0)
        LOOM_RETURN_IF_ERROR(
            takeSpare(slot.bytes, slot.data, /*countInPeak=*/false));
      stashBytes += static_cast<int64_t>(slot.bytes);
      result.stashPeakBytes = std::max(result.stashPeakBytes, stashBytes);
      stashSlot = slot.data;
      LOOM_RETURN_IF_ERROR(runList(chunk.forward(), false, mb, timings,
                                   static_cast<int32_t>(a->chunk()), false,
                                   /*flush=*/false));
      if (chunk.loss() >= 0) {
        // Kept on the device; read back once after the schedule.
        float *lossAt = nullptr;
        LOOM_RETURN_IF_ERROR(lossSlot(lossCount, lossCapacity, lossAt));
        LOOM_RETURN_IF_ERROR(memory->copy(
            lossAt, bufferData(static_cast<uint32_t>(chunk.loss())),
            sizeof(float)));
        ++lossCount;
      }
      stashSlot = nullptr;
      if (forwardOnly) {
        // No backward reads the slot: it is free for the next forward.
        // (Sends were copied when started, so nothing refers to it.)
        stashBytes -= static_cast<int64_t>(slot.bytes);
        returnSpare(slot.bytes, slot.data);
        slots.erase(key);
      }
      continue;
    }
    // 3. Backward, on the micro-batch's stash slot; then the slot is free.
    auto it = slots.find(key);
    LOOM_CHECK(it != slots.end(), "stage " << stageTable->index()
                                           << ": backward of micro-batch "
                                           << mb << " before its forward");
    stashSlot = it->second.data;
    LOOM_RETURN_IF_ERROR(runList(chunk.backward(), false, mb, timings,
                                 static_cast<int32_t>(a->chunk()), true,
                                 /*flush=*/false));
    stashSlot = nullptr;
    stashBytes -= static_cast<int64_t>(it->second.bytes);
    returnSpare(it->second.bytes, it->second.data);
    slots.erase(it);
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
