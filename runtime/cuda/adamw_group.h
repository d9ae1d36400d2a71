//===- adamw_group.h - Many parameters' AdamW in one launch -----*- C++ -*-===//
//
// The update of a GPT-2 124M step is 148 AdamW instructions, each followed
// by a Cast of the new master weights to the bf16 compute copy: 296 launches,
// most of them on a few hundred elements (biases, layer-norm parameters),
// and every AdamW thread forming the step's bias corrections (two double
// pow) for its one element. adamwGroupStep runs a whole group of them in
// ceil(count / kAdamWGroupLaunchTensors) launches (the tensors' pointers
// travel as kernel parameters, as PyTorch's multi_tensor_apply does), forms
// the scalars once per thread and writes the bf16 copy from the updated
// value in registers. The arithmetic is adamw_step.cuh's and the rounding
// bf16_round.cuh's, so the results are bit for bit those of the
// instructions one by one.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_ADAMW_GROUP_H
#define LOOM_RUNTIME_CUDA_ADAMW_GROUP_H

#include "runtime/core/kernel_backend.h"
#include "runtime/core/status.h"
#include "runtime/cuda/kernels.h"

#include <cstddef>
#include <cuda_runtime_api.h>

namespace loom::cuda {

/// Tensors per launch: their descriptors (64 bytes each) must fit the 4 KiB
/// of kernel parameters every architecture allows.
constexpr size_t kAdamWGroupLaunchTensors = 48;

/// Every tensor's AdamW step (h's weightDecay unused: each tensor's own),
/// in order of launch; lr, step (1-based, as f32) and gradScale are device
/// scalars. The tensors must be disjoint.
Status adamwGroupStep(const AdamWGroupMember *tensors, size_t count,
                      const float *lr, const float *step,
                      const float *gradScale, const AdamWHyper &h,
                      cudaStream_t stream);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_ADAMW_GROUP_H
