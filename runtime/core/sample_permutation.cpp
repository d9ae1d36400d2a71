//===- sample_permutation.cpp - A keyed shuffle of [0, n) -------*- C++ -*-===//
#include "runtime/core/sample_permutation.h"

#include "runtime/core/param_init.h"

namespace loom {

SamplePermutation::SamplePermutation(int64_t size, uint64_t seed,
                                     int64_t epoch)
    : n(static_cast<uint64_t>(size)), halfBits(1) {
  // 2^(2 halfBits) >= n, and < 4n once n > 1: fewer than 4 walks per index
  // on average.
  while (halfBits < 32 && (uint64_t(1) << (2 * halfBits)) < n)
    ++halfBits;
  const uint64_t epochKey =
      splitMix64(seed ^ splitMix64(static_cast<uint64_t>(epoch)));
  for (uint64_t r = 0; r < 4; ++r)
    keys[r] = splitMix64(epochKey + r);
}

int64_t SamplePermutation::operator()(int64_t i) const {
  const uint64_t mask = (uint64_t(1) << halfBits) - 1;
  uint64_t x = static_cast<uint64_t>(i);
  // Cycle walking: the Feistel network permutes [0, 2^(2 halfBits)); from a
  // point inside [0, n), following it until it lands inside [0, n) again
  // restricts it to a permutation of [0, n).
  do {
    uint64_t left = x >> halfBits, right = x & mask;
    for (uint64_t key : keys) {
      const uint64_t next = left ^ (splitMix64(right ^ key) & mask);
      left = right;
      right = next;
    }
    x = (left << halfBits) | right;
  } while (x >= n);
  return static_cast<int64_t>(x);
}

} // namespace loom
