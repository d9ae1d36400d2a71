//===- Pipelines.cpp - Named pass pipelines ---------------------*- C++ -*-===//

#include "passes/Pipelines.h"

#include "passes/Passes.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::loom;

void mlir::loom::buildCompilePipeline(OpPassManager &pm,
                                      const CompilePipelineOptions &options) {
  if (options.train) {
    LoomAutodiffOptions autodiff;
    autodiff.microbatches = options.microbatches;
    autodiff.maxNorm = options.maxNorm;
    autodiff.beta1 = options.beta1;
    autodiff.beta2 = options.beta2;
    autodiff.eps = options.eps;
    autodiff.weightDecay = options.weightDecay;
    pm.addPass(createLoomAutodiff(autodiff));
  }
  // Any precision but fp32 is the mixed-precision pass's to accept or
  // refuse (with a diagnostic naming the value).
  if (options.precision != "fp32") {
    LoomMixedPrecisionOptions mixed;
    mixed.dtype = options.precision;
    mixed.gradPrecision = options.gradPrecision;
    pm.addPass(createLoomMixedPrecision(mixed));
  }
  if (options.train) {
    LoomRecomputeOptions recompute;
    recompute.mode = options.recompute;
    pm.addPass(createLoomRecompute(recompute));
  }
  // Vocabulary padding: --loom-tensor-parallel pads a table it splits;
  // an unsplit one is padded here (Megatron pads at every tp size).
  if (!(options.partition && options.tensorParallel)) {
    LoomPadVocabOptions padVocab;
    padVocab.vocabDivisibleBy = options.vocabDivisibleBy;
    pm.addPass(createLoomPadVocab(padVocab));
  }
  if (options.partition) {
    if (options.tensorParallel) {
      LoomTensorParallelOptions tensorParallel;
      tensorParallel.sequenceParallel = options.sequenceParallel;
      tensorParallel.vocabDivisibleBy = options.vocabDivisibleBy;
      pm.addPass(createLoomTensorParallel(tensorParallel));
    }
    LoomZeroOptions zero;
    zero.stage = options.zeroStage;
    pm.addPass(createLoomZero(zero));
    pm.addPass(createLoomPropagate());
    LoomPartitionOptions partition;
    partition.reduceOncePerStep = options.reduceOncePerStep;
    pm.addPass(createLoomPartition(partition));
  }
  if (options.pipelineStages > 1) {
    LoomPipelineOptions pipeline;
    pipeline.stages = options.pipelineStages;
    pipeline.schedule = options.schedule;
    pipeline.virtualStages = options.virtualStages;
    pipeline.peakTflops = options.peakTflops;
    pipeline.bandwidthGbs = options.bandwidthGbs;
    pipeline.reduceOncePerStep = options.reduceOncePerStep;
    // An evaluation is pipelined forward-only, over the micro-batches its
    // batch is split into (a training step knows its own).
    pipeline.forwardOnly = !options.train;
    if (!options.train)
      pipeline.microbatches = options.microbatches;
    pm.addPass(createLoomPipeline(pipeline));
  }
  if (options.partition) {
    LoomScheduleCommOptions comm;
    comm.bucketMb = options.bucketMb;
    pm.addPass(createLoomScheduleComm(comm));
  }
  // With one micro-batch the backward writes the gradients where the
  // accumulators are (after every pass that looks for the accumulation).
  if (options.train)
    pm.addPass(createLoomFoldAccumulation());
  LoomPlanBuffersOptions plan;
  plan.alignment = options.alignment;
  pm.addPass(createLoomPlanBuffers(plan));
}

void mlir::loom::registerLoomPipelines() {
  PassPipelineRegistration<CompilePipelineOptions>(
      "loom-compile-pipeline",
      "Model IR to runtime-ready IR (optionally the training step, then "
      "buffer planning), as `loom compile` runs it",
      buildCompilePipeline);
}
