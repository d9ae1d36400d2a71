//===- training_run.h - One run of a compiled program -----------*- C++ -*-===//
//
// What loom-run does with a program once its command line is parsed
// (run_options.h): load the program, create the executor on the backend
// the caller chose, then train / evaluate for --steps batches of the token
// file (progress on stdout, the JSON log and trace, the checkpoint), or
// sample greedily after a prompt. loom-run calls it with the CPU or CUDA
// backend; the device-memory check (test/runtime/GuardedRun.cpp) calls it
// with memory the host may not touch, so that every path a user runs is
// proven to reach buffers only through BufferMemory.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_TRAINING_RUN_H
#define LOOM_RUNTIME_CORE_TRAINING_RUN_H

#include "runtime/core/buffer_memory.h"
#include "runtime/core/communicator.h"
#include "runtime/core/kernel_backend.h"
#include "runtime/core/run_options.h"
#include "runtime/core/status.h"

#include <functional>
#include <memory>

namespace loom {

/// Makes the kernels and the buffer memory an executor runs on (both
/// non-null, the kernels accepting the memory's pointers). An empty
/// function: the CPU kernels on host memory.
using ExecutorBackendFactory =
    std::function<Status(std::unique_ptr<KernelBackend> &kernels,
                         std::unique_ptr<BufferMemory> &memory)>;

/// How a run that succeeded ended.
struct RunOutcome {
  /// The steps run (opts.steps unless a stop request ended the run early).
  int64_t stepsRun = 0;
  /// The signal that stopped the run before its last step (stop_request.h;
  /// any rank's), 0 when it ran them all.
  int stopSignal = 0;
  /// Whether --time-limit stopped it before its last step.
  bool timeLimit = false;
};

/// Runs `opts.steps` steps of the program on this rank (`comm`: the world,
/// laid out over the program's mesh here; a multi-rank job runs the stage
/// of its pp coordinate): a training program trains (and saves
/// --save-checkpoint after the last step), an evaluation program reports
/// the loss. Rank 0 prints progress unless --quiet and writes the JSON log.
/// A stop request (any rank's, agreed on after every step) ends the run
/// after the step in progress as if it had been the last: summary, and
/// for training the checkpoint of the steps done.
Status runProgram(const RunOptions &opts, Communicator &comm,
                  const ExecutorBackendFactory &backend = {},
                  RunOutcome *outcome = nullptr);

/// --sample: greedy generation after --prompt on this process alone (its
/// own single-rank communicator), the text on stdout.
Status runSample(const RunOptions &opts,
                 const ExecutorBackendFactory &backend = {});

} // namespace loom

#endif // LOOM_RUNTIME_CORE_TRAINING_RUN_H
