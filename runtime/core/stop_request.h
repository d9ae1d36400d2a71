//===- stop_request.h - Stop a run after its current step -------*- C++ -*-===//
//
// A run asked to stop by a signal -- Ctrl-C (SIGINT), a scheduler's
// preemption notice (SIGTERM), or SIGUSR1, which OpenMPI's mpirun passes on
// to every rank -- finishes the step in progress, saves --save-checkpoint
// and exits, instead of dying mid-step with the progress since the last
// checkpoint lost (torchtitan's and Megatron's exit-signal handling). The
// handler only records the signal; the run polls it between steps, and the
// ranks agree on it there (runProgram). After the first request SIGINT and
// SIGTERM are no longer caught: a second one ends the process at once.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_STOP_REQUEST_H
#define LOOM_RUNTIME_CORE_STOP_REQUEST_H

namespace loom {

/// Records SIGINT, SIGTERM and SIGUSR1 as stop requests from now on.
void installStopRequestHandlers();
/// Restores the default dispositions and forgets any request (tests).
void resetStopRequest();
/// The signal that asked this process to stop; 0 when none did.
int stopRequestSignal();
/// "SIGINT", "SIGTERM", "SIGUSR1", else "signal N".
const char *stopSignalName(int signal);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_STOP_REQUEST_H
