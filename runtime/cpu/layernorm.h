//===- layernorm.h - LayerNorm over the last dimension ----------*- C++ -*-===//
//
// y = (x - mean) * rstd * weight + bias per row of C elements, rstd =
// 1/sqrt(var + eps) with the biased variance (as torch.nn.LayerNorm). The
// forward saves mean and rstd per row for the backward.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_LAYERNORM_H
#define LOOM_RUNTIME_CPU_LAYERNORM_H

#include <cstdint>

namespace loom::cpu {

/// out[N,C], mean[N], rstd[N] from inp[N,C], weight[C], bias[C].
void layernormForward(float *out, float *mean, float *rstd, const float *inp,
                      const float *weight, const float *bias, int64_t N,
                      int64_t C, float eps = 1e-5f);

/// The mean and rstd layernormForward writes, without the normalized output
/// (bitwise equal to the forward's): gradient instructions recompute them
/// instead of keeping the forward's statistics alive.
void layernormStats(float *mean, float *rstd, const float *inp, int64_t N,
                    int64_t C, float eps = 1e-5f);

/// dinp[N,C] is overwritten; dweight[C] and dbias[C] are accumulated (+=).
/// Any of the three may be null to skip it.
void layernormBackward(float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight,
                       const float *mean, const float *rstd, int64_t N,
                       int64_t C);

/// Reference versions (plain loops, double statistics), same contracts.
void layernormForwardReference(float *out, float *mean, float *rstd,
                               const float *inp, const float *weight,
                               const float *bias, int64_t N, int64_t C,
                               float eps = 1e-5f);
void layernormBackwardReference(float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp,
                                const float *weight, const float *mean,
                                const float *rstd, int64_t N, int64_t C);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_LAYERNORM_H
