//===- ChildProcess.h - Run loom-run, passing on stop signals ---*- C++ -*-===//
//
// `loom eval` / `loom train` run loom-run (or mpirun with one loom-run per
// rank, or one loom-run per rank themselves) and wait for it. A Ctrl-C or a
// SIGTERM sent to `loom` must reach the ranks as a request to stop after the
// current step (stop_request.h), not kill mpirun, which takes its ranks down
// mid-step: so the child runs in a process group of its own (the terminal's
// Ctrl-C reaches `loom` alone) and `loom` passes the first SIGINT / SIGTERM on:
// to a lone loom-run as itself, to mpirun as SIGUSR1, which mpirun forwards to
// every rank (it would answer SIGINT / SIGTERM by killing them) and loom-run
// treats as a stop request too. A second one is passed on as SIGTERM to
// the whole group: stop now.
//
// --backend cuda ranks need no MPI (NCCL bootstraps through a file,
// tools/loom-run's LOOM_RANK / LOOM_WORLD_SIZE / LOOM_NCCL_ID_FILE), so
// `loom` starts them itself, as torchrun starts a node's processes: every
// rank in one process group, which gets the first SIGINT / SIGTERM as it
// is (each rank stops after the same step) and SIGTERM on the second. The
// first rank to fail ends the others (SIGKILL) instead of leaving them to
// wait for it in a collective.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TOOLS_LOOM_CHILDPROCESS_H
#define LOOM_TOOLS_LOOM_CHILDPROCESS_H

#include <functional>
#include <string>
#include <vector>

namespace loom::cli {

struct ChildResult {
  /// The child's exit status; 128 + N when signal N killed it; -1 when it
  /// could not be started (`error` says why).
  int status = -1;
  std::string error;
  /// The first SIGINT / SIGTERM this process received while waiting (0:
  /// none).
  int stopSignal = 0;
  /// Several ranks: the first that failed (-1: none); `status` is its.
  int failedRank = -1;
};

/// Runs the program `argv[0]` (a path) with `argv` and waits for it,
/// passing stop signals on as the header describes (`mpirun`: the child is
/// mpirun).
ChildResult runPassingOnStopSignals(const std::vector<std::string> &argv,
                                    bool mpirun);

/// Runs `ranks` copies of the program `argv[0]` with `argv`, rank r with
/// this process's environment plus `rankEnvironment(r)` ("NAME=value"
/// entries, which replace the inherited ones), and waits for all, as the
/// header describes. `status`: 0 when every rank succeeded, the failed
/// rank's, or 128 + the stop signal when the ranks stopped on one.
ChildResult runRanksPassingOnStopSignals(
    const std::vector<std::string> &argv, int ranks,
    const std::function<std::vector<std::string>(int rank)> &rankEnvironment);

} // namespace loom::cli

#endif // LOOM_TOOLS_LOOM_CHILDPROCESS_H
