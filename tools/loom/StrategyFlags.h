//===- StrategyFlags.h - Parallel strategy flags of `loom` ------*- C++ -*-===//
//
// The strategy flags every `loom` subcommand accepts (--mesh, --zero, ...),
// parsed and checked in one place. Strategies that the compiler cannot yet
// produce are rejected with a message naming the flag.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TOOLS_LOOM_STRATEGYFLAGS_H
#define LOOM_TOOLS_LOOM_STRATEGYFLAGS_H

#include <cstdint>
#include <map>
#include <string>

namespace loom::cli {

struct Strategy {
  /// Mesh axis sizes by name, in the order given (dp, tp, pp).
  std::map<std::string, int64_t> mesh{{"dp", 1}, {"tp", 1}, {"pp", 1}};
  int64_t zero = 0;
  /// Activation recomputation (--recompute none|selective|full).
  std::string recompute = "none";
  /// All-reduce bucket capacity in MiB (--bucket-mb; 0: one per tensor).
  double bucketMb = 25.0;
  int64_t microbatches = 1;
  std::string schedule = "1f1b";
  int64_t virtualStages = 1;
  bool sequenceParallel = false;
  /// --vocab-divisible-by: a vocabulary tp does not divide is padded to a
  /// multiple of this times tp (Megatron's make-vocab-size-divisible-by).
  int64_t vocabDivisibleBy = 128;
  std::string backend = "cpu";
  std::string precision = "fp32";
  /// --grad-precision: the gradient accumulators and their reductions under
  /// --precision bf16, "bf16" or "fp32" ("": bf16 mixed precision's 2-byte
  /// gradients; fp32 training's are fp32).
  std::string gradPrecision;

  int64_t worldSize() const;
};

/// Whether `flag` is a strategy flag that takes a value (--mesh, --zero,
/// ...); --sequence-parallel is a switch.
bool strategyFlagTakesValue(const std::string &flag);

/// Consumes `flag` (with `value`) if it is a strategy flag. Returns false
/// if `flag` is not one; sets `error` when it is one with a bad value.
bool parseStrategyFlag(const std::string &flag, const std::string &value,
                       Strategy &strategy, std::string &error);

/// Checks that this build can compile `strategy` (for a training step when
/// `train`); sets `error` otherwise.
bool checkStrategySupported(const Strategy &strategy, bool train,
                            std::string &error);

} // namespace loom::cli

#endif // LOOM_TOOLS_LOOM_STRATEGYFLAGS_H
