//===- adamw_step.cuh - One AdamW element, for every kernel ----*- CUDA -*-===//
//
// The fp32 AdamW kernel (kernels.cu), the mixed-storage one (kernels_bf16.cu:
// bf16 gradients on fp32 masters) and the grouped one (adamw_group.cu) must
// update an element with the same arithmetic as cpu::adamwStep, in the same
// order, so the GPU matches the CPU run to fp32 round-off. This is that
// arithmetic, once; the kernels only load and store. The step's scalars
// (bias corrections in double) are apart from the element update so that a
// kernel looping over many elements forms them once per thread, not once
// per element.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_ADAMW_STEP_CUH
#define LOOM_RUNTIME_CUDA_ADAMW_STEP_CUH

#include "runtime/cuda/kernels.h"

#include <cmath>

namespace loom::cuda {

/// What one step's update of every element shares: formed in double from
/// the learning rate `lr` and the 1-based `step`, rounded once, as
/// cpu::adamwStep does.
struct AdamWStepScalars {
  double lr;
  float stepSize, bc2Sqrt, oneMinusB1, oneMinusB2, beta2, eps;
};

__device__ inline AdamWStepScalars adamwStepScalars(double lr, double step,
                                                    const AdamWHyper &h) {
  const double bc1 = 1.0 - pow(h.beta1, step);
  const double bc2 = 1.0 - pow(h.beta2, step);
  AdamWStepScalars s;
  s.lr = lr;
  s.stepSize = static_cast<float>(lr / bc1);
  s.bc2Sqrt = static_cast<float>(sqrt(bc2));
  s.oneMinusB1 = static_cast<float>(1.0 - h.beta1);
  s.oneMinusB2 = static_cast<float>(1.0 - h.beta2);
  s.beta2 = static_cast<float>(h.beta2);
  s.eps = static_cast<float>(h.eps);
  return s;
}

/// The factor a parameter with weight decay `weightDecay` is scaled by.
__device__ inline float adamwDecay(const AdamWStepScalars &s,
                                   double weightDecay) {
  return static_cast<float>(1.0 - s.lr * weightDecay);
}

/// Updates one parameter `p` and its moments `m`, `v` in place from its
/// (already clip-scaled) gradient `g`.
__device__ inline void adamwUpdate(float g, float &p, float &m, float &v,
                                   const AdamWStepScalars &s, float decay) {
  const float decayed = p * decay;
  const float mi = m + s.oneMinusB1 * (g - m);
  const float vi = s.beta2 * v + s.oneMinusB2 * g * g;
  const float denom = sqrtf(vi) / s.bc2Sqrt + s.eps;
  p = decayed - s.stepSize * (mi / denom);
  m = mi;
  v = vi;
}

/// adamwUpdate with the scalars of `lr`, `step` and `h` formed for it alone.
__device__ inline void adamwElement(float g, float &p, float &m, float &v,
                                    double lr, double step,
                                    const AdamWHyper &h) {
  const AdamWStepScalars s = adamwStepScalars(lr, step, h);
  adamwUpdate(g, p, m, v, s, adamwDecay(s, h.weightDecay));
}

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_ADAMW_STEP_CUH
