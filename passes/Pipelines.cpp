//===- Pipelines.cpp - Named pass pipelines --------------------*- C++ -*-===//

#include "passes/Pipelines.h"

#include "passes/Passes.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::loom;

void mlir::loom::buildCompilePipeline(OpPassManager &pm,
                                      const CompilePipelineOptions &options) {
  LoomPlanBuffersOptions plan;
  plan.alignment = options.alignment;
  pm.addPass(createLoomPlanBuffers(plan));
}

void mlir::loom::registerLoomPipelines() {
  PassPipelineRegistration<CompilePipelineOptions>(
      "loom-compile-pipeline",
      "Model IR to runtime-ready IR (buffer planning), as `loom compile` "
      "runs it",
      buildCompilePipeline);
}
