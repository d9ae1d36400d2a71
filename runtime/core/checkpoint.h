//===- checkpoint.h - Parameters to and from safetensors -------*- C++ -*-===//
//
// Checkpoints hold every parameter under its HF GPT-2 name with its global
// shape, in fp32, so PyTorch / HF tools read them. A rank loads its local
// slice of each tensor; on a single rank the local slice is the whole tensor,
// which is what saving needs (sharded saving arrives with the multi-rank
// runtime).
//
// A training program's checkpoint also holds the AdamW moments as
// `optimizer.exp_avg.<name>` and `optimizer.exp_avg_sq.<name>` (same shapes)
// and the number of completed steps as metadata "step", so a run resumes
// exactly where it stopped.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_CHECKPOINT_H
#define LOOM_RUNTIME_CORE_CHECKPOINT_H

#include "runtime/core/executor.h"
#include "runtime/core/status.h"

#include <string>

namespace loom {

/// Overwrites every parameter of `executor` with its slice of the tensor of
/// the same name in the safetensors file `path` (F32, BF16, F16 or F64).
/// For a training program, also the AdamW moments when the file has them
/// (then `completedSteps` receives its "step" metadata); a weights-only file
/// zeroes the moments and gives 0 steps. Eval programs ignore optimizer
/// tensors. Errors name the file and the tensor: missing tensor, global shape
/// mismatch, unsupported dtype, optimizer state for only some parameters.
Status loadCheckpoint(Executor &executor, const std::string &path,
                      int64_t *completedSteps = nullptr);

/// Writes every parameter of `executor` to `path` (fp32, global shape,
/// metadata {"format": "pt", "producer": "loom"}) atomically; for a training
/// program also the AdamW moments and metadata "step" = `completedSteps`.
/// Errors when a parameter is sliced (its other parts live on other ranks).
Status saveCheckpoint(const Executor &executor, const std::string &path,
                      int64_t completedSteps = 0);

/// Names of the AdamW moment tensors of parameter `name`.
std::string expAvgName(const std::string &name);
std::string expAvgSqName(const std::string &name);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_CHECKPOINT_H
