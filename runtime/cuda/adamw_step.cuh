//===- adamw_step.cuh - One AdamW element, shared by both kernels -*- CUDA -*-===//
//
// The fp32 AdamW kernel (kernels.cu) and the mixed-storage one
// (kernels_bf16.cu: bf16 gradients on fp32 masters) must update an element
// with the same arithmetic as cpu::adamwStep, in the same order, so the GPU
// matches the CPU run to fp32 round-off. This is that arithmetic, once; the
// kernels only load and store.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_ADAMW_STEP_CUH
#define LOOM_RUNTIME_CUDA_ADAMW_STEP_CUH

#include "runtime/cuda/kernels.h"

#include <cmath>

namespace loom::cuda {

/// Updates one parameter `p` and its moments `m`, `v` in place from its
/// (already clip-scaled) gradient `g`, at learning rate `lr` and 1-based
/// `step`. The scalars are formed in double and rounded once, as
/// cpu::adamwStep does.
__device__ inline void adamwElement(float g, float &p, float &m, float &v,
                                    double lr, double step,
                                    const AdamWHyper &h) {
  const double bc1 = 1.0 - pow(h.beta1, step);
  const double bc2 = 1.0 - pow(h.beta2, step);
  const float stepSize = static_cast<float>(lr / bc1);
  const float bc2Sqrt = static_cast<float>(sqrt(bc2));
  const float decay = static_cast<float>(1.0 - lr * h.weightDecay);
  const float oneMinusB1 = static_cast<float>(1.0 - h.beta1);
  const float oneMinusB2 = static_cast<float>(1.0 - h.beta2);
  const float decayed = p * decay;
  const float mi = m + oneMinusB1 * (g - m);
  const float vi = static_cast<float>(h.beta2) * v + oneMinusB2 * g * g;
  const float denom = sqrtf(vi) / bc2Sqrt + static_cast<float>(h.eps);
  p = decayed - stepSize * (mi / denom);
  m = mi;
  v = vi;
}

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_ADAMW_STEP_CUH
