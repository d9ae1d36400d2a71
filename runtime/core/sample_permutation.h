//===- sample_permutation.h - A keyed shuffle of [0, n) ---------*- C++ -*-===//
//
// --shuffle's order of a token file's sequences: for each epoch a
// pseudo-random permutation of [0, n), computed index by index (a 4-round
// Feistel network on the smallest even-width power of two >= n, walked
// until it lands inside [0, n)), so it needs no memory and no state: the
// sample at position i of epoch e depends only on (seed, e, i). A resumed
// run, and every data-parallel rank reading its own rows, see the order
// an uninterrupted single-rank run sees. (Megatron shuffles its sample
// index with a seeded RNG and stores it; a bijection computed on demand
// gives the same guarantee for any file size.)
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_SAMPLE_PERMUTATION_H
#define LOOM_RUNTIME_CORE_SAMPLE_PERMUTATION_H

#include <cstdint>

namespace loom {

class SamplePermutation {
public:
  /// The permutation of [0, n) (n >= 1) for `epoch` under `seed`.
  SamplePermutation(int64_t n, uint64_t seed, int64_t epoch);

  /// Where position `i` (0 <= i < n) goes: a bijection of [0, n).
  int64_t operator()(int64_t i) const;

private:
  uint64_t n;
  uint32_t halfBits; // each Feistel half; the domain is 2^(2 halfBits) >= n
  uint64_t keys[4];
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_SAMPLE_PERMUTATION_H
