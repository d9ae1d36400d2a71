//===- sampling_contexts.h - Short-context sampling programs ----*- C++ -*-===//
//
// Sampling runs the forward once per token over the program's whole seq (there
// is no KV cache), so with a short context most of that work is on padding
// (GPT-2 124M at seq 1024, 2 cores: 1.44 s a token; bench/sample_cpu).
// `loom sample` therefore also compiles the model at shorter seqs (halving
// down to 16), and loom-run --context-programs F,F,... runs, for each token,
// the shortest program whose seq holds the context (nanoGPT's sample.py runs
// the forward on the context's own length, which a compiled program cannot).
// The tokens are the same: causal attention keeps the padding after the
// context from reaching its last position, whatever the seq.
//
// Every program is of one model, so they have the same parameters (names,
// shapes, dtypes: wpe is [n_positions, C] whatever the seq). The longest
// program's executor holds the weights (the checkpoint is loaded into it); a
// shorter program's executor is created when the context first needs it, and
// the weights are copied in by name. One shorter executor lives at a time: the
// next one replaces it, so memory stays at two executors.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_SAMPLING_CONTEXTS_H
#define LOOM_RUNTIME_CORE_SAMPLING_CONTEXTS_H

#include "runtime/core/executor.h"
#include "runtime/core/status.h"
#include "runtime/program/program.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace loom {

class SamplingContexts {
public:
  /// Creates the (uninitialized: ParamStart::Loaded) executor of a program.
  using CreateExecutor = std::function<Status(
      const program::LoadedProgram &program, std::unique_ptr<Executor> &ex)>;

  /// `longest`: the executor of the program sampling was asked for, holding
  /// the weights (not owned; must outlive this). `shorterPaths`: evaluation
  /// program files of the same model at shorter seqs (in any order). Loads
  /// and checks them: one rank and one stage, the model's dimensions, a seq
  /// below longest's and no two alike, and longest's parameters under the
  /// same names, dtypes and shapes (fp32 masters alike). Errors name the
  /// file.
  static Status create(Executor &longest,
                       const std::vector<std::string> &shorterPaths,
                       CreateExecutor createExecutor,
                       std::unique_ptr<SamplingContexts> &out);

  /// An ExecutorForContext (sampler.h): the shortest program's executor
  /// whose seq holds `length` tokens, else the longest.
  Status executorFor(int64_t length, Executor *&ex);

  /// The shorter programs' seqs, ascending.
  std::vector<int64_t> seqs() const;

private:
  struct Rung {
    std::string path;
    std::unique_ptr<program::LoadedProgram> program;
    int64_t seq = 0;
  };

  SamplingContexts() = default;
  /// Copies every parameter of `longest` into `to` by name.
  Status copyWeights(Executor &to, const std::string &path) const;

  Executor *longest = nullptr;
  CreateExecutor createExecutor;
  std::vector<Rung> rungs; // ascending seq, each below longest's
  /// The rung whose executor `current` is; rungs.size(): none.
  size_t currentRung = 0;
  std::unique_ptr<Executor> current;
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_SAMPLING_CONTEXTS_H
