//===- ChildProcess.cpp - Run loom-run, passing on stop signals -*- C++ -*-===//
#include "tools/loom/ChildProcess.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace loom::cli {

namespace {

volatile std::sig_atomic_t gChild = 0;
volatile std::sig_atomic_t gFirstSignal = 0;
/// What the first signal is passed on as (0: itself).
volatile std::sig_atomic_t gStopAs = 0;

void writeNote(const char *text) {
  // write(2) is async-signal-safe; stdio is not.
  [[maybe_unused]] ssize_t n = ::write(2, text, std::strlen(text));
}

extern "C" void passOnStopSignal(int signal) {
  const pid_t child = static_cast<pid_t>(gChild);
  if (gFirstSignal == 0) {
    gFirstSignal = signal;
    writeNote(gStopAs ? "loom: stopping the ranks after the step in progress "
                        "(SIGUSR1 through mpirun); signal again to stop now\n"
                      : "loom: stopping after the step in progress; signal "
                        "again to stop now\n");
    if (child > 0)
      ::kill(child, gStopAs ? static_cast<int>(gStopAs) : signal);
    return;
  }
  if (child > 0)
    ::kill(-child, SIGTERM);
}

} // namespace

ChildResult runPassingOnStopSignals(const std::vector<std::string> &argv,
                                    bool mpirun) {
  ChildResult result;
  gStopAs = mpirun ? SIGUSR1 : 0;
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group (pgid = its pid), and the default dispositions
  // of the signals this process catches.
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);

  // Catch before spawning, so that no signal falls between the two; the
  // handler does nothing until it knows the child.
  struct sigaction action {}, oldInt{}, oldTerm{};
  action.sa_handler = passOnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &oldInt);
  sigaction(SIGTERM, &action, &oldTerm);
  gFirstSignal = 0;

  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], nullptr, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    result.error = std::string("cannot start '") + argv[0] +
                   "': " + std::strerror(rc);
  } else {
    gChild = pid;
    // A signal that came before the child was known is passed on now.
    if (gFirstSignal != 0)
      ::kill(pid, gStopAs ? static_cast<int>(gStopAs)
                          : static_cast<int>(gFirstSignal));
    int status = 0;
    pid_t waited;
    do {
      waited = ::waitpid(pid, &status, 0);
    } while (waited < 0 && errno == EINTR);
    if (waited < 0)
      result.error = std::string("cannot wait for '") + argv[0] +
                     "': " + std::strerror(errno);
    else if (WIFEXITED(status))
      result.status = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      result.status = 128 + WTERMSIG(status);
    gChild = 0;
  }
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGTERM, &oldTerm, nullptr);
  result.stopSignal = gFirstSignal;
  return result;
}

} // namespace loom::cli
