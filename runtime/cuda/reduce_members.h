//===- reduce_members.h - Member-order reduction on the device --*- C++ -*-===//
//
// The reduction step of the NCCL communicator's allReduceAmong (a
// pipeline's tied parameter, reduced among the stages that hold it): every
// member holds all members' values side by side and reduces them in member
// order, in fp32 (bf16 widened, the result rounded once), exactly as the
// host path in communicator.cpp does, so every member, on either backend,
// gets the same bits.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_REDUCE_MEMBERS_H
#define LOOM_RUNTIME_CUDA_REDUCE_MEMBERS_H

#include "runtime/core/status.h"
#include "runtime/program/program.h"

#include <cstdint>
#include <cuda_runtime_api.h>

namespace loom::cuda {

/// out[i] = op over k = 0..n-1 (in order) of all[k * count + i], f32 or
/// bf16 elements (`bf16`); Avg divides the sum by n. `out` may be any of
/// the n blocks.
Status reduceMembers(void *out, const void *all, int64_t n, int64_t count,
                     bool bf16, program::Reduction op, cudaStream_t stream);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_REDUCE_MEMBERS_H
