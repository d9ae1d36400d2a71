//===- executor_step.cpp - The step drivers of Executor ---------*- C++ -*-===//
//
// run / runList (an instruction list, with timings and in-flight
// collectives completed; last-micro-batch reductions skipped before the
// last micro-batch), and one step of a stage that is not a pipeline
// stage: trainStep (zero the gradients, the micro-batches, the update),
// runUpdate, zeroGradients and evaluate. A pipeline stage's actions are in
// executor_pipeline.cpp.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/executor.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <new>
#include <string>

namespace loom {

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

Status Executor::run(std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(!isPipelined(),
             "stage " << stageTable->index()
                      << " is a pipeline stage; it runs its actions "
                         "(trainStep, or evaluatePipelined without an "
                         "update)");
  return runList(stageTable->instructions(), false, 0, timings);
}

Status Executor::runList(
    const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>> *list,
    bool update, uint32_t microbatch, std::vector<InstructionTiming> *timings,
    int32_t chunk, bool backward, bool flush, uint32_t end) {
  if (!list)
    return Status::success();
  end = std::min(end, list->size());
  for (uint32_t i = 0; i < end; ++i) {
    const program::Instruction *ins = list->Get(i);
    // DDP's no_sync: the step's gradient reductions run in its last
    // micro-batch; before it, each rank's gradients accumulate locally (the
    // reduction is in place, so skipping it leaves its input as its result).
    if (ins->last_microbatch_only() &&
        static_cast<int64_t>(microbatch) + 1 < stageTable->microbatches())
      continue;
    // An AdamW group (adamw_groups.h) runs its instructions in one call.
    const AdamWGroupPlan *group = nullptr;
    if (update && !adamwGroups.empty()) {
      auto g = adamwGroups.find(ins);
      if (g != adamwGroups.end() && i + g->second.count <= end)
        group = &g->second;
    }
    // A fused span (a GEMM and its GELU, a residual Add and a layer norm, a
    // loss and its gradient) runs as one call.
    const FusedSpan *fused = nullptr;
    if (!update && chunk < 0 && !fusedSpans.empty()) {
      auto f = fusedSpans.find(ins);
      if (f != fusedSpans.end() && i + f->second.count <= end)
        fused = &f->second;
    }
    uint32_t covered = group ? group->count : fused ? fused->count : 1;
    const int64_t start = timings ? steadyNowNs() : 0;
    Status s = Status::success();
    try {
      bool ranFused = false;
      if (group) {
        s = runAdamWGroup(*list, *group);
      } else if (fused) {
        s = runFusedSpan(*list, i, *fused, ranFused);
        if (s.ok() && !ranFused) {
          // The backend declined the span (its shapes and pointers stay the
          // same every step): the instructions run one by one from now on,
          // each its own trace span.
          fused = nullptr;
          covered = 1;
          fusedSpans.erase(ins);
        }
      }
      if (s.ok() && !group && !ranFused) {
        s = completeInFlight(ins);
        if (s.ok())
          s = runInstruction(*ins);
      }
    } catch (const std::bad_alloc &) {
      s = Status::error("out of memory allocating a temporary");
    } catch (const std::exception &e) {
      s = Status::error(std::string("cannot allocate a temporary: ") +
                        e.what());
    }
    if (!s.ok())
      return s.withContext(
          "stage " + std::to_string(stageTable->index()) + ", " +
          (chunk >= 0 ? "chunk " + std::to_string(chunk) +
                            (backward ? " backward " : " forward ")
                      : std::string()) +
          (update ? "update instruction #" : "instruction #") +
          std::to_string(i) +
          (group ? " to #" + std::to_string(i + covered - 1) + " (a group of " +
                       std::to_string(group->members.size()) +
                       " AdamW updates in one call)"
                 : " '" + (ins->name() ? ins->name()->str() : std::string()) +
                       "' (" + program::opcodeName(ins->opcode()) +
                       (fused ? ", run with the " +
                                    program::opcodeName(
                                        list->Get(i + covered - 1)->opcode()) +
                                    " after it in one call"
                              : std::string()) +
                       ")"));
    if (timings) {
      // A device backend returns before its kernels finish: waiting for
      // them makes the recorded span the instruction's device time (the
      // trace then shows where a step's time goes, at the cost of the
      // overlap between host and device).
      LOOM_RETURN_IF_ERROR(memory->synchronize());
      timings->push_back({i, start, steadyNowNs(), microbatch, update, chunk,
                          backward, covered});
    }
    i += covered - 1;
    if (!inFlight.empty())
      comm->progress();
  }
  // Started all-reduces and sends complete before the list's buffers may
  // be reused. (A pipeline's sends are copied when started; waiting for
  // them after each action could block on a neighbour that first needs
  // this stage's next message, so the step flushes them once at its end.)
  LOOM_RETURN_IF_ERROR(completeInFlight(nullptr));
  return flush ? comm->flush() : Status::success();
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

bool Executor::isTraining() const {
  const auto *update = stageTable->update_instructions();
  return update && update->size() > 0;
}

Status Executor::zeroGradients() {
  for (const ParamView &p : paramViews)
    if (p.gradBuffer >= 0)
      LOOM_RETURN_IF_ERROR(memory->fillZero(
          bufferData(static_cast<uint32_t>(p.gradBuffer)),
          static_cast<uint64_t>(bufferNumel(p.gradBuffer) *
                                program::dtypeBytes(bufferDType(
                                    static_cast<uint32_t>(p.gradBuffer))))));
  return Status::success();
}

Status Executor::runUpdate(int64_t step, float lr,
                           std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(step >= 1, "training step numbers are 1-based, got " << step);
  const float stepValue = static_cast<float>(step);
  if (stageTable->lr() >= 0)
    LOOM_RETURN_IF_ERROR(memory->copyIn(
        bufferData(static_cast<uint32_t>(stageTable->lr())), &lr,
        sizeof(float)));
  if (stageTable->step() >= 0)
    LOOM_RETURN_IF_ERROR(memory->copyIn(
        bufferData(static_cast<uint32_t>(stageTable->step())), &stepValue,
        sizeof(float)));
  return runList(stageTable->update_instructions(), true, 0, timings);
}

Status Executor::checkMicrobatchBuffers(int64_t rows, int64_t T) const {
  for (int32_t b : {stageTable->tokens(), stageTable->targets()})
    LOOM_CHECK(b < 0 || bufferNumel(static_cast<uint32_t>(b)) == rows * T,
               "stage " << stageTable->index() << ": buffer "
                        << program::shapeString(shapes[b])
                        << " does not hold one micro-batch of " << rows << " x "
                        << T << " tokens");
  return Status::success();
}

Status Executor::trainStep(const int32_t *inputs, const int32_t *targets,
                           int64_t step, float lr, TrainStepResult &result,
                           std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(isTraining(), "stage " << stageTable->index()
                                    << " is not a training program (it has "
                                       "no update_instructions)");
  const int64_t M = stageTable->microbatches();
  const int64_t rows = localBatch() / M, T = modelInfo->seq();
  LOOM_RETURN_IF_ERROR(checkMicrobatchBuffers(rows, T));
  // 1. Gradients accumulate over the micro-batches from zero.
  LOOM_RETURN_IF_ERROR(zeroGradients());
  double lossSum = 0;
  if (isPipelined())
    LOOM_RETURN_IF_ERROR(
        trainStepPipelined(inputs, targets, result, timings));
  for (int64_t i = 0; !isPipelined() && i < M; ++i) {
    // 2. Micro-batch i is rows [i*b, (i+1)*b) of the batch.
    LOOM_RETURN_IF_ERROR(copyMicrobatchIn(inputs, targets, i * rows, rows));
    LOOM_RETURN_IF_ERROR(runList(stageTable->instructions(), false,
                                 static_cast<uint32_t>(i), timings));
    if (stageTable->loss() >= 0) {
      // Kept on the device; read back once after the last micro-batch.
      float *slot = nullptr;
      LOOM_RETURN_IF_ERROR(lossSlot(i, M, slot));
      LOOM_RETURN_IF_ERROR(memory->copy(
          slot, bufferData(static_cast<uint32_t>(stageTable->loss())),
          sizeof(float)));
    }
  }
  if (!isPipelined() && stageTable->loss() >= 0)
    LOOM_RETURN_IF_ERROR(sumLossSlots(M, lossSum));
  if (!isPipelined())
    result.loss = static_cast<float>(lossSum / static_cast<double>(M));
  // 3. Clip and update once.
  LOOM_RETURN_IF_ERROR(runUpdate(step, lr, timings));
  result.gradNorm = std::numeric_limits<float>::quiet_NaN();
  if (stageTable->grad_norm() >= 0)
    LOOM_RETURN_IF_ERROR(memory->copyOut(
        &result.gradNorm,
        bufferData(static_cast<uint32_t>(stageTable->grad_norm())),
        sizeof(float)));
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

Status Executor::forwardInstructionCount(uint32_t &count) const {
  const auto *list = stageTable->instructions();
  const int32_t lossBuffer = stageTable->loss();
  count = 0;
  for (uint32_t i = 0; list && lossBuffer >= 0 && i < list->size(); ++i)
    for (uint32_t o : *list->Get(i)->outputs())
      if (o == static_cast<uint32_t>(lossBuffer))
        count = i + 1;
  LOOM_CHECK(count > 0, "stage "
                            << stageTable->index()
                            << ": no instruction writes the loss buffer"
                            << (lossBuffer < 0 ? " (the stage has none)" : "")
                            << "; the forward alone cannot be evaluated");
  return Status::success();
}

Status Executor::evaluateLoss(const int32_t *inputs, const int32_t *targets,
                              float &loss) {
  TrainStepResult result;
  if (!isTraining()) {
    if (!isPipelined())
      return evaluate(inputs, targets, loss);
    LOOM_RETURN_IF_ERROR(evaluatePipelined(inputs, targets, result));
    loss = result.loss;
    return Status::success();
  }
  const int64_t M = stageTable->microbatches();
  const int64_t rows = localBatch() / M, T = modelInfo->seq();
  LOOM_RETURN_IF_ERROR(checkMicrobatchBuffers(rows, T));
  if (isPipelined()) {
    LOOM_RETURN_IF_ERROR(trainStepPipelined(inputs, targets, result, nullptr,
                                            /*forwardOnly=*/true));
    loss = result.loss;
    return Status::success();
  }
  uint32_t forwardEnd = 0;
  LOOM_RETURN_IF_ERROR(forwardInstructionCount(forwardEnd));
  for (int64_t i = 0; i < M; ++i) {
    LOOM_RETURN_IF_ERROR(copyMicrobatchIn(inputs, targets, i * rows, rows));
    LOOM_RETURN_IF_ERROR(runList(stageTable->instructions(), false,
                                 static_cast<uint32_t>(i), nullptr, -1, false,
                                 true, forwardEnd));
    float *slot = nullptr;
    LOOM_RETURN_IF_ERROR(lossSlot(i, M, slot));
    LOOM_RETURN_IF_ERROR(memory->copy(
        slot, bufferData(static_cast<uint32_t>(stageTable->loss())),
        sizeof(float)));
  }
  double lossSum = 0;
  LOOM_RETURN_IF_ERROR(sumLossSlots(M, lossSum));
  loss = static_cast<float>(lossSum / static_cast<double>(M));
  return Status::success();
}

Status Executor::evaluate(const int32_t *inputs, const int32_t *targets,
                          float &loss,
                          std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(!isTraining() && !isPipelined(),
             "stage " << stageTable->index()
                      << " is not an unpipelined evaluation program (use "
                         "trainStep or evaluatePipelined)");
  const int64_t rows = localBatch(), T = modelInfo->seq();
  LOOM_RETURN_IF_ERROR(checkMicrobatchBuffers(rows, T));
  LOOM_RETURN_IF_ERROR(copyMicrobatchIn(inputs, targets, 0, rows));
  LOOM_RETURN_IF_ERROR(run(timings));
  return readLoss(loss);
}

} // namespace loom
