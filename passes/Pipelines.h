//===- Pipelines.h - Named pass pipelines -----------------------*- C++ -*-===//
//
// The pass sequences `loom compile` runs, as C++ functions taking an options
// struct (shardy's addPropagationPipeline style), plus their registration as
// loom-opt flags.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PIPELINES_H
#define LOOM_PASSES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::loom {

/// Options of the model IR -> runtime-ready IR pipeline.
struct CompilePipelineOptions
    : public PassPipelineOptions<CompilePipelineOptions> {
  Option<int64_t> alignment{*this, "alignment",
                            llvm::cl::desc("Byte alignment of every buffer"),
                            llvm::cl::init(64)};
};

/// Model IR -> IR that `--loom-to-program` can serialize: today buffer
/// planning; later issues insert autodiff and partitioning in front.
void buildCompilePipeline(OpPassManager &pm,
                          const CompilePipelineOptions &options);

/// Registers `--loom-compile-pipeline` with loom-opt.
void registerLoomPipelines();

} // namespace mlir::loom

#endif // LOOM_PASSES_PIPELINES_H
