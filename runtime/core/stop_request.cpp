//===- stop_request.cpp - Stop a run after its current step -----*- C++ -*-===//
//
// The handler stores the first signal and puts SIGINT's and SIGTERM's
// default dispositions back (signal() is async-signal-safe), so that a
// user who presses Ctrl-C twice, or a launcher that follows its stop
// request with SIGTERM, is not stuck waiting for a long step.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/stop_request.h"

#include <csignal>
#include <cstdio>

namespace loom {

namespace {

volatile std::sig_atomic_t gStopSignal = 0;

extern "C" void recordStopRequest(int signal) {
  if (gStopSignal == 0)
    gStopSignal = signal;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1};

} // namespace

void installStopRequestHandlers() {
  for (int signal : kStopSignals) {
    struct sigaction action {};
    action.sa_handler = recordStopRequest;
    sigemptyset(&action.sa_mask);
    // Blocking reads and waits resume after the handler: the step in
    // progress goes on undisturbed.
    action.sa_flags = SA_RESTART;
    sigaction(signal, &action, nullptr);
  }
}

void resetStopRequest() {
  for (int signal : kStopSignals)
    std::signal(signal, SIG_DFL);
  gStopSignal = 0;
}

int stopRequestSignal() { return gStopSignal; }

const char *stopSignalName(int signal) {
  switch (signal) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGUSR1:
    return "SIGUSR1";
  }
  static thread_local char name[32];
  std::snprintf(name, sizeof(name), "signal %d", signal);
  return name;
}

} // namespace loom
