//===- param_init.h - Partition-independent parameter init ------*- C++ -*-===//
//
// Every parallel strategy must start from the same model, so the value of a
// parameter element depends only on (seed, parameter name, global flat index)
// and never on which rank owns it or how the tensor is sliced. This is done
// with a counter-based generator: the name is hashed (FNV-1a/64), combined with
// the seed into a key, and each element's random bits come from SplitMix64
// finalizers applied to (key, counter derived from the global index).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_PARAM_INIT_H
#define LOOM_RUNTIME_CORE_PARAM_INIT_H

#include "runtime/core/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

/// 64-bit FNV-1a hash of `text`.
uint64_t fnv1a64(const std::string &text);

/// The SplitMix64 finalizer: a bijective 64-bit mixer.
uint64_t splitMix64(uint64_t x);

/// The random 64 bits of stream `(seed, name)` at counter `counter`. Pure
/// function of its arguments; exposed so tests and other generators (e.g.
/// dropout masks later) share one definition.
uint64_t counterRandom(uint64_t seed, uint64_t nameHash, uint64_t counter);

/// Fills `out[0..count)` with samples of normal(0, std) for global elements
/// [globalOffset, globalOffset + count) of parameter `name`. Element i uses two
/// uniforms drawn from counters 2i and 2i+1 (Box-Muller, cosine branch), so it
/// does not depend on its neighbours.
void initNormal(float *out, const std::string &name, uint64_t seed, float std,
                int64_t globalOffset, int64_t count);

/// Fills `out[0..count)` with uniform(low, high) samples for global elements
/// [globalOffset, globalOffset + count) of parameter `name`.
void initUniform(float *out, const std::string &name, uint64_t seed, float low,
                 float high, int64_t globalOffset, int64_t count);

/// Fills `out[0..count)` with 0.
void initZeros(float *out, int64_t count);

/// Fills `out[0..count)` with 1.
void initOnes(float *out, int64_t count);

/// How a parameter is initialized (the `initializer` of the program's
/// parameter table).
struct ParamInitializer {
  enum class Kind { Zeros, Ones, Normal, Uniform };
  Kind kind = Kind::Zeros;
  /// Standard deviation for Normal.
  float std = 0.02f;
  /// Bounds for Uniform.
  float low = 0.0f, high = 1.0f;
};

/// Fills a local shard of parameter `name`. The full tensor has `globalShape`
/// (row-major); the shard is the box starting at `sliceOffset` with extent
/// `sliceSize` in every dimension, stored densely row-major in `out`
/// (product(sliceSize) floats). Each local element gets the value of its global
/// flat index, so any partitioning reassembles into the same full tensor.
/// Errors when ranks differ, a dimension is negative, or the box leaves the
/// tensor.
Status initParamSlice(float *out, const std::string &name, uint64_t seed,
                      const ParamInitializer &init,
                      const std::vector<int64_t> &globalShape,
                      const std::vector<int64_t> &sliceOffset,
                      const std::vector<int64_t> &sliceSize);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_PARAM_INIT_H
