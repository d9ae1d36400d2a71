//===- softmax.h - Row softmax over the last dimension ----------*- C++ -*-===//
#ifndef LOOM_RUNTIME_CPU_SOFTMAX_H
#define LOOM_RUNTIME_CPU_SOFTMAX_H

#include <cstdint>

namespace loom::cpu {

/// out[N,C] = softmax of each row of inp[N,C], max-subtracted so large logits
/// do not overflow. out may alias inp.
void softmaxForward(float *out, const float *inp, int64_t N, int64_t C);

/// dinp = out * (dout - sum(out * dout)) per row, from the forward's output.
/// dinp is overwritten and may alias dout.
void softmaxBackward(float *dinp, const float *dout, const float *out,
                     int64_t N, int64_t C);

/// Reference versions in double precision, same contracts.
void softmaxForwardReference(float *out, const float *inp, int64_t N,
                             int64_t C);
void softmaxBackwardReference(float *dinp, const float *dout, const float *out,
                              int64_t N, int64_t C);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_SOFTMAX_H
