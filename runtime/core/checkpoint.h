//===- checkpoint.h - Parameters to and from safetensors -------*- C++ -*-===//
//
// Checkpoints hold every parameter under its HF GPT-2 name with its global
// shape, in fp32, so PyTorch / HF tools read them. A rank loads its local
// slice of each tensor; on a single rank the local slice is the whole tensor,
// which is what saving needs (sharded saving arrives with the multi-rank
// runtime).
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
/// Errors name the file and the tensor: missing tensor, global shape
/// mismatch, unsupported dtype.
Status loadCheckpoint(Executor &executor, const std::string &path);

/// Writes every parameter of `executor` to `path` (fp32, global shape,
/// metadata {"format": "pt", "producer": "loom"}) atomically. Errors when a
/// parameter is sliced (its other parts live on other ranks).
Status saveCheckpoint(const Executor &executor, const std::string &path);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_CHECKPOINT_H
