//===- model_flops.h - Model FLOPs per token and MFU ------------*- C++ -*-===//
//
// Model FLOPs utilization as llm.c, nanoGPT and torchtitan report it: the
// FLOPs a training step of the model needs, whatever the run recomputes or
// wastes, over what the devices could do. A token costs 6N (forward and
// backward through every weight) + 6·L·C·T (attention's scores and values,
// T the trained sequence length) FLOPs, N the model's parameter count as
// compiled (a padded vocabulary's rows included, as llm.c counts them).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_MODEL_FLOPS_H
#define LOOM_RUNTIME_CORE_MODEL_FLOPS_H

#include "runtime/program/program.h"

#include <cstdint>

namespace loom {

/// The model's parameter count: the global size of every parameter of every
/// stage of `program`, each name once (GPT-2's tied wte sits in the first
/// and the last pipeline stage).
int64_t modelParameterCount(const program::Program &program);

/// 6N + 6·L·C·T: the FLOPs one trained token costs (model() gives L, C
/// and T).
double trainingFlopsPerToken(const program::Program &program);

/// The share of `devices` devices' peak (TFLOP/s each) that `tokensPerSec`
/// tokens a second at `flopsPerToken` use; 0 when the peak is unknown (0).
double modelFlopsUtilization(double flopsPerToken, double tokensPerSec,
                             double peakTflops, int devices);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_MODEL_FLOPS_H
