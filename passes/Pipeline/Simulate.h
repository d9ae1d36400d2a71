//===- Simulate.h - Run a pipeline schedule on paper ------------*- C++ -*-===//
//
// Executes the stages' action lists against a model of what each action
// does: the sends and receives of the chunk function it runs (in program
// order) and how long its compute takes. Sends are buffered (they never
// block, as the runtime's communicator), a receive waits for the matching
// send, and messages between two stages with one tag arrive in the order
// they were sent (MPI's non-overtaking rule). Two results:
//
// * a proof that the schedule cannot deadlock and that every receive gets
//   the micro-batch it expects, or an error naming the stage, the action
//   and the micro-batch where it goes wrong;
// * a timeline (start and end of every action when each stage starts an
//   action as soon as it is free and its inputs have arrived), from which
//   the bubble fraction and the activations in flight follow.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PIPELINE_SIMULATE_H
#define LOOM_PASSES_PIPELINE_SIMULATE_H

#include "dialects/Loom/IR/PipelineActions.h"

#include "llvm/ADT/SmallVector.h"

#include <string>

namespace mlir::loom {

/// A send or receive of a chunk function, in program order.
struct CommEvent {
  bool send = false;
  /// Pipeline coordinate of the other stage.
  int64_t peer = 0;
  int64_t tag = 0;
  int64_t bytes = 0;
};

/// What running the forward / backward of one model chunk costs.
struct ChunkModel {
  double forwardSeconds = 0, backwardSeconds = 0;
  llvm::SmallVector<CommEvent> forwardComm, backwardComm;
  /// Bytes the forward keeps for the backward, per micro-batch in flight.
  int64_t stashBytes = 0;
};

/// A pipeline: chunk k runs on stage k mod stages.
struct PipelineModel {
  int64_t stages = 1, virtualStages = 1, microbatches = 1;
  llvm::SmallVector<ChunkModel> chunks;
  llvm::SmallVector<llvm::SmallVector<PipelineAction>> actions;
  /// Point-to-point bandwidth; a message takes bytes / this to arrive
  /// (<= 0: messages arrive when sent).
  double linkBytesPerSecond = 0;
  /// An evaluation: forward actions only, nothing kept between them (no
  /// micro-batch is ever in flight).
  bool forwardOnly = false;
};

struct ActionTiming {
  PipelineAction action;
  double start = 0, end = 0;
};

struct StageTimeline {
  llvm::SmallVector<ActionTiming> actions;
  double busySeconds = 0;
  /// makespan - busy: time the stage waits (the bubble).
  double idleSeconds = 0;
  /// Most micro-batches whose forward has run and backward not yet, and
  /// the activation bytes they keep.
  int64_t peakInFlight = 0;
  int64_t peakStashBytes = 0;
};

struct Timeline {
  llvm::SmallVector<StageTimeline> stages;
  double makespan = 0;
  /// Idle share of the step: sum of idle / (stages x makespan).
  double bubbleFraction() const;
  /// Idle over busy time: the papers' t_bubble / t_ideal, (p - 1) / (v m)
  /// with equal stages.
  double bubbleOverhead() const;
};

/// Runs `model`. Fails with `error` set when a receive waits forever (a
/// deadlock: every stage still running waits, each named with its action
/// and micro-batch), gets another micro-batch or size than it expects, or
/// a send is never received.
bool simulatePipeline(const PipelineModel &model, Timeline &timeline,
                      std::string &error);

} // namespace mlir::loom

#endif // LOOM_PASSES_PIPELINE_SIMULATE_H
