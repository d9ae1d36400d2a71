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
  Option<bool> partition{
      *this, "partition",
      llvm::cl::desc("Partition over the module's loom.mesh: seed data "
                     "parallelism (--loom-zero), propagate, partition"),
      llvm::cl::init(false)};
  Option<int64_t> zeroStage{*this, "zero", llvm::cl::desc("ZeRO stage"),
                            llvm::cl::init(0)};
  Option<bool> tensorParallel{
      *this, "tensor-parallel",
      llvm::cl::desc("With partition: seed Megatron tensor parallelism on "
                     "the tp axis (--loom-tensor-parallel) before ZeRO"),
      llvm::cl::init(false)};
  Option<bool> sequenceParallel{
      *this, "sequence-parallel",
      llvm::cl::desc("With tensor-parallel: split the residual stream on the "
                     "sequence over tp (Korthikanti et al. 2022)"),
      llvm::cl::init(false)};
  Option<int64_t> vocabDivisibleBy{
      *this, "vocab-divisible-by",
      llvm::cl::desc("With tensor-parallel: pad a vocabulary tp does not "
                     "divide to a multiple of this times tp; without: pad "
                     "it to a multiple of this (1: no padding)"),
      llvm::cl::init(128)};
  Option<double> bucketMb{
      *this, "bucket-mb",
      llvm::cl::desc("Bucket capacity in MiB of the all-reduces, ZeRO-2/3 "
                     "reduce-scatters and ZeRO-3 prefetched gathers (0: "
                     "one per value)"),
      llvm::cl::init(25.0)};
  Option<bool> reduceOncePerStep{
      *this, "reduce-once-per-step",
      llvm::cl::desc("Reduce data-parallel gradients once per step, not per "
                     "micro-batch (false: the old per-micro-batch placement, "
                     "for comparison)"),
      llvm::cl::init(true)};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("Activation recomputation: none, selective or full"),
      llvm::cl::init("none")};
  Option<int64_t> pipelineStages{
      *this, "pp",
      llvm::cl::desc("Pipeline stages (> 1: --loom-pipeline after "
                     "partitioning)"),
      llvm::cl::init(1)};
  Option<std::string> schedule{*this, "schedule",
                               llvm::cl::desc("gpipe, 1f1b or interleaved"),
                               llvm::cl::init("1f1b")};
  Option<int64_t> virtualStages{
      *this, "virtual-stages",
      llvm::cl::desc("Model chunks per pipeline stage (interleaved)"),
      llvm::cl::init(1)};
  Option<double> peakTflops{
      *this, "peak-tflops",
      llvm::cl::desc("Peak TFLOP/s of the cost model the pipeline stages "
                     "are balanced on"),
      llvm::cl::init(100.0)};
  Option<double> bandwidthGbs{
      *this, "bandwidth-gbs",
      llvm::cl::desc("Memory bandwidth (GB/s) of that cost model"),
      llvm::cl::init(2000.0)};
  Option<bool> train{*this, "train",
                     llvm::cl::desc("Derive the training step (autodiff + "
                                    "AdamW) before lowering"),
                     llvm::cl::init(false)};
  Option<std::string> precision{
      *this, "precision",
      llvm::cl::desc("fp32, or bf16: mixed precision (--loom-mixed-precision "
                     "after autodiff: bf16 compute, fp32 master weights and "
                     "moments)"),
      llvm::cl::init("fp32")};
  Option<std::string> gradPrecision{
      *this, "grad-precision",
      llvm::cl::desc("With precision=bf16: the gradient accumulators and "
                     "their reductions, bf16 (2 bytes, the ZeRO paper's "
                     "16 bytes per parameter) or fp32 (18)"),
      llvm::cl::init("bf16")};
  Option<int64_t> microbatches{*this, "microbatches",
                               llvm::cl::desc("Micro-batches per step"),
                               llvm::cl::init(1)};
  Option<double> maxNorm{*this, "max-norm",
                         llvm::cl::desc("Gradient-norm clip (<= 0: none)"),
                         llvm::cl::init(1.0)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"),
                       llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"),
                       llvm::cl::init(0.999)};
  Option<double> eps{*this, "eps", llvm::cl::desc("AdamW epsilon"),
                     llvm::cl::init(1e-8)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("AdamW decoupled weight decay"),
                             llvm::cl::init(0.01)};
};

/// Model IR -> IR that `--loom-to-program` can serialize: with `train`, the
/// training step is derived first (--loom-autodiff); with `precision=bf16`,
/// it (or the evaluated model) is made bf16 mixed precision
/// (--loom-mixed-precision, before recomputation); with `partition`, the
/// step is split over the module's mesh (--loom-tensor-parallel when
/// `tensor-parallel`, with `sequence-parallel` its option, --loom-zero,
/// --loom-propagate, --loom-partition); with `pp` > 1 it is cut into
/// pipeline stages (--loom-pipeline; an evaluation forward-only, over
/// `microbatches`); then buffer planning.
void buildCompilePipeline(OpPassManager &pm,
                          const CompilePipelineOptions &options);

/// Registers `--loom-compile-pipeline` with loom-opt.
void registerLoomPipelines();

} // namespace mlir::loom

#endif // LOOM_PASSES_PIPELINES_H
