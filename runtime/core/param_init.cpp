//===- param_init.cpp - Partition-independent parameter init ----*- C++ -*-===//
//
// See param_init.h for the contract. The generator is a keyed hash of the
// element counter, so filling any sub-range (or any rank's slice) reproduces
// exactly the values the full tensor would have.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/param_init.h"

#include <cmath>

namespace loom {

uint64_t fnv1a64(const std::string &text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t splitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t counterRandom(uint64_t seed, uint64_t nameHash, uint64_t counter) {
  // Two rounds of mixing: the key separates (seed, name) streams, the second
  // round decorrelates consecutive counters within one stream.
  uint64_t key = splitMix64(seed ^ splitMix64(nameHash));
  return splitMix64(key ^ splitMix64(counter + 0x632be59bd9b4e019ULL));
}

namespace {

/// Maps 64 random bits to a double in (0, 1]; never 0, so log() is finite.
double toUnitOpenClosed(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

} // namespace

void initNormal(float *out, const std::string &name, uint64_t seed, float std,
                int64_t globalOffset, int64_t count) {
  const uint64_t nameHash = fnv1a64(name);
  const double twoPi = 6.283185307179586476925;
#pragma omp parallel for schedule(static) if (count > 65536)
  for (int64_t j = 0; j < count; ++j) {
    uint64_t i = static_cast<uint64_t>(globalOffset + j);
    double u1 = toUnitOpenClosed(counterRandom(seed, nameHash, 2 * i));
    double u2 = toUnitOpenClosed(counterRandom(seed, nameHash, 2 * i + 1));
    double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(twoPi * u2);
    out[j] = static_cast<float>(z * static_cast<double>(std));
  }
}

void initUniform(float *out, const std::string &name, uint64_t seed, float low,
                 float high, int64_t globalOffset, int64_t count) {
  const uint64_t nameHash = fnv1a64(name);
#pragma omp parallel for schedule(static) if (count > 65536)
  for (int64_t j = 0; j < count; ++j) {
    uint64_t i = static_cast<uint64_t>(globalOffset + j);
    // Counter 2i, the same one the normal draw uses for u1: each element keeps
    // its own stream position regardless of the distribution.
    double u = toUnitOpenClosed(counterRandom(seed, nameHash, 2 * i));
    out[j] = static_cast<float>(low + (static_cast<double>(high) - low) * u);
  }
}

void initZeros(float *out, int64_t count) {
  for (int64_t j = 0; j < count; ++j)
    out[j] = 0.0f;
}

void initOnes(float *out, int64_t count) {
  for (int64_t j = 0; j < count; ++j)
    out[j] = 1.0f;
}

Status initParamSlice(float *out, const std::string &name, uint64_t seed,
                      const ParamInitializer &init,
                      const std::vector<int64_t> &globalShape,
                      const std::vector<int64_t> &sliceOffset,
                      const std::vector<int64_t> &sliceSize) {
  const size_t rank = globalShape.size();
  LOOM_CHECK(sliceOffset.size() == rank && sliceSize.size() == rank,
             "parameter '" << name << "': slice rank (offset "
                           << sliceOffset.size() << ", size "
                           << sliceSize.size() << ") differs from tensor rank "
                           << rank
                           << "; give one offset and one size per dimension");
  int64_t localCount = 1;
  for (size_t d = 0; d < rank; ++d) {
    LOOM_CHECK(globalShape[d] >= 0 && sliceOffset[d] >= 0 && sliceSize[d] >= 0,
               "parameter '" << name << "': dimension " << d
                             << " has a negative shape/offset/size");
    LOOM_CHECK(sliceOffset[d] + sliceSize[d] <= globalShape[d],
               "parameter '"
                   << name << "': slice [" << sliceOffset[d] << ", "
                   << sliceOffset[d] + sliceSize[d] << ") of dimension " << d
                   << " leaves the tensor (size " << globalShape[d]
                   << "); the shard must lie inside the global shape");
    localCount *= sliceSize[d];
  }
  if (init.kind == ParamInitializer::Kind::Zeros) {
    initZeros(out, localCount);
    return Status::success();
  }
  if (init.kind == ParamInitializer::Kind::Ones) {
    initOnes(out, localCount);
    return Status::success();
  }
  if (localCount == 0)
    return Status::success();

  // Walk the slice one innermost run at a time: each run is contiguous in both
  // the shard and the full tensor, so it is one ranged generator call.
  const int64_t inner = rank == 0 ? 1 : sliceSize[rank - 1];
  const int64_t runs = localCount / inner;
  std::vector<int64_t> globalStride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    globalStride[d - 1] = globalStride[d] * globalShape[d];
  std::vector<int64_t> index(rank, 0); // local index of the run's first element
  for (int64_t r = 0; r < runs; ++r) {
    int64_t globalFlat = 0;
    for (size_t d = 0; d < rank; ++d)
      globalFlat += (sliceOffset[d] + index[d]) * globalStride[d];
    float *dst = out + r * inner;
    if (init.kind == ParamInitializer::Kind::Normal)
      initNormal(dst, name, seed, init.std, globalFlat, inner);
    else
      initUniform(dst, name, seed, init.low, init.high, globalFlat, inner);
    // Advance the multi-index over all but the innermost dimension.
    for (size_t d = rank == 0 ? 0 : rank - 1; d-- > 0;) {
      if (++index[d] < sliceSize[d])
        break;
      index[d] = 0;
    }
  }
  return Status::success();
}

} // namespace loom
