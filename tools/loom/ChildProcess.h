//===- ChildProcess.h - Run loom-run, passing on stop signals ---*- C++ -*-===//
//
// `loom eval` / `loom train` run loom-run (or mpirun with one loom-run per
// rank) and wait for it. A Ctrl-C or a SIGTERM sent to `loom` must reach
// the ranks as a request to stop after the current step (stop_request.h),
// not kill mpirun, which takes its ranks down mid-step: so the child runs
// in a process group of its own (the terminal's Ctrl-C reaches `loom`
// alone) and `loom` passes the first SIGINT / SIGTERM on: to a lone
// loom-run as itself, to mpirun as SIGUSR1, which mpirun forwards to every
// rank (it would answer SIGINT / SIGTERM by killing them) and loom-run
// treats as a stop request too. A second one is passed on as SIGTERM to
// the whole group: stop now.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TOOLS_LOOM_CHILDPROCESS_H
#define LOOM_TOOLS_LOOM_CHILDPROCESS_H

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
};

/// Runs the program `argv[0]` (a path) with `argv` and waits for it,
/// passing stop signals on as the header describes (`mpirun`: the child is
/// mpirun).
ChildResult runPassingOnStopSignals(const std::vector<std::string> &argv,
                                    bool mpirun);

} // namespace loom::cli

#endif // LOOM_TOOLS_LOOM_CHILDPROCESS_H
