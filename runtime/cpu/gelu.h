//===- gelu.h - GELU, tanh approximation (GPT-2) ----------------*- C++ -*-===//
//
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the form GPT-2
// and HF `gelu_new` / torch `approximate="tanh"` use.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_GELU_H
#define LOOM_RUNTIME_CPU_GELU_H

#include <cstdint>

namespace loom::cpu {

/// out[i] = gelu(inp[i]) for n elements (out may alias inp).
void geluForward(float *out, const float *inp, int64_t n);

/// dinp[i] = gelu'(inp[i]) * dout[i] (overwritten; dinp may alias dout).
void geluBackward(float *dinp, const float *inp, const float *dout, int64_t n);

/// Reference versions in double precision, same contracts.
void geluForwardReference(float *out, const float *inp, int64_t n);
void geluBackwardReference(float *dinp, const float *inp, const float *dout,
                           int64_t n);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_GELU_H
