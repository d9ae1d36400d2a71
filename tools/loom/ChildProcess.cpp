//===- ChildProcess.cpp - Run loom-run, passing on stop signals -*- C++ -*-===//
#include "tools/loom/ChildProcess.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace loom::cli {

namespace {

/// The child's process group (its pgid: the first child's pid; 0 until
/// known) and whether the first signal goes to all of it (several ranks)
/// or to its leader alone (loom-run, or mpirun).
volatile std::sig_atomic_t gGroup = 0;
volatile std::sig_atomic_t gWholeGroup = 0;
volatile std::sig_atomic_t gFirstSignal = 0;
/// What the first signal is passed on as (0: itself).
volatile std::sig_atomic_t gStopAs = 0;

void writeNote(const char *text) {
  // write(2) is async-signal-safe; stdio is not.
  [[maybe_unused]] ssize_t n = ::write(2, text, std::strlen(text));
}

/// Passes the first stop signal on (see gStopAs, gWholeGroup).
void passOnFirst(int signal) {
  const pid_t group = static_cast<pid_t>(gGroup);
  if (group > 0)
    ::kill(gWholeGroup ? -group : group,
           gStopAs ? static_cast<int>(gStopAs) : signal);
}

extern "C" void passOnStopSignal(int signal) {
  const pid_t group = static_cast<pid_t>(gGroup);
  if (gFirstSignal == 0) {
    gFirstSignal = signal;
    writeNote(gStopAs       ? "loom: stopping the ranks after the step in "
                              "progress (SIGUSR1 through mpirun); signal "
                              "again to stop now\n"
              : gWholeGroup ? "loom: stopping the ranks after the step in "
                              "progress; signal again to stop now\n"
                            : "loom: stopping after the step in progress; "
                              "signal again to stop now\n");
    passOnFirst(signal);
    return;
  }
  if (group > 0)
    ::kill(-group, SIGTERM);
}

/// Catches SIGINT and SIGTERM with passOnStopSignal until destroyed (set up
/// before a child is spawned, so that no signal falls between the two; the
/// handler does nothing until it knows the child).
class StopSignalsPassedOn {
public:
  StopSignalsPassedOn(bool wholeGroup, int stopAs) {
    gGroup = 0;
    gWholeGroup = wholeGroup;
    gStopAs = stopAs;
    gFirstSignal = 0;
    struct sigaction action {};
    action.sa_handler = passOnStopSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, &oldInt);
    sigaction(SIGTERM, &action, &oldTerm);
  }
  ~StopSignalsPassedOn() {
    gGroup = 0;
    sigaction(SIGINT, &oldInt, nullptr);
    sigaction(SIGTERM, &oldTerm, nullptr);
  }
  /// The child's group is known: a signal that came before is passed on.
  void childGroupIs(pid_t group) {
    gGroup = group;
    if (gFirstSignal != 0)
      passOnFirst(static_cast<int>(gFirstSignal));
  }

private:
  struct sigaction oldInt = {};
  struct sigaction oldTerm = {};
};

/// Spawn attributes: process group `group` (0: a new one, led by the
/// child) and the default dispositions of the signals this process catches.
struct SpawnAttributes {
  explicit SpawnAttributes(pid_t group) {
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, group);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
  }
  ~SpawnAttributes() { posix_spawnattr_destroy(&attr); }
  posix_spawnattr_t attr;
};

/// The exit status of a waited-for process, as a shell gives it.
int exitStatus(int status) {
  return WIFEXITED(status)     ? WEXITSTATUS(status)
         : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                               : -1;
}

/// Whether child `pid` has not exited yet; one that has stays waitable
/// (WNOWAIT: the wait loop still reaps it and reads its status).
bool stillRunning(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info,
                  WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0;
}

std::vector<char *> cArgs(const std::vector<std::string> &strings) {
  std::vector<char *> out;
  for (const std::string &a : strings)
    out.push_back(const_cast<char *>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

} // namespace

ChildResult runPassingOnStopSignals(const std::vector<std::string> &argv,
                                    bool mpirun) {
  ChildResult result;
  StopSignalsPassedOn signals(/*wholeGroup=*/false, mpirun ? SIGUSR1 : 0);
  std::vector<char *> args = cArgs(argv);
  SpawnAttributes spawn(/*group=*/0);
  pid_t pid = 0;
  const int rc =
      posix_spawn(&pid, args[0], nullptr, &spawn.attr, args.data(), environ);
  if (rc != 0) {
    result.error = std::string("cannot start '") + argv[0] +
                   "': " + std::strerror(rc);
  } else {
    signals.childGroupIs(pid);
    int status = 0;
    pid_t waited;
    do {
      waited = ::waitpid(pid, &status, 0);
    } while (waited < 0 && errno == EINTR);
    if (waited < 0)
      result.error = std::string("cannot wait for '") + argv[0] +
                     "': " + std::strerror(errno);
    else
      result.status = exitStatus(status);
  }
  result.stopSignal = gFirstSignal;
  return result;
}

ChildResult runRanksPassingOnStopSignals(
    const std::vector<std::string> &argv, int ranks,
    const std::function<std::vector<std::string>(int rank)> &rankEnvironment) {
  ChildResult result;
  StopSignalsPassedOn signals(/*wholeGroup=*/true, /*stopAs=*/0);
  std::vector<char *> args = cArgs(argv);
  std::vector<pid_t> pids;
  pid_t group = 0;
  // 1. Start rank 0 (leading a new process group), then the others in it.
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<std::string> env = rankEnvironment(rank);
    for (char **e = environ; *e; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('='));
      bool replaced = false;
      for (const std::string &mine : env)
        replaced |= mine.compare(0, name.size() + 1, name + "=") == 0;
      if (!replaced)
        env.push_back(entry);
    }
    std::vector<char *> envp = cArgs(env);
    SpawnAttributes spawn(group);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, args[0], nullptr, &spawn.attr, args.data(),
                               envp.data());
    if (rc != 0) {
      result.error = "cannot start rank " + std::to_string(rank) + " ('" +
                     argv[0] + "'): " + std::strerror(rc);
      if (group > 0)
        ::kill(-group, SIGKILL);
      break;
    }
    pids.push_back(pid);
    if (group == 0) {
      group = pid;
      signals.childGroupIs(group);
    }
  }
  // 2. Wait for every rank. The first to fail ends the others at once:
  //    they would wait for it in their next collective until the NCCL
  //    watchdog's timeout (LOOM_NCCL_TIMEOUT) ended them.
  int failed = -1;
  std::vector<bool> reaped(pids.size(), false);
  for (size_t left = pids.size(); left > 0;) {
    int status = 0;
    const pid_t pid = ::waitpid(-group, &status, 0);
    if (pid < 0) {
      if (errno == EINTR)
        continue;
      result.error =
          std::string("cannot wait for the ranks: ") + std::strerror(errno);
      ::kill(-group, SIGKILL);
      break;
    }
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end())
      continue;
    --left;
    const int rank = static_cast<int>(it - pids.begin());
    reaped[rank] = true;
    const int code = exitStatus(status);
    const bool stopped =
        gFirstSignal != 0 && (code == 128 + gFirstSignal || code == 0);
    // (Ranks killed because another could not start are not failures.)
    if (code == 0 || stopped || failed >= 0 || !result.error.empty())
      continue;
    failed = rank;
    result.status = code;
    std::string note = "loom: rank " + std::to_string(rank) + " of " +
                       std::to_string(ranks) + " exited with status " +
                       std::to_string(code);
    if (WIFSIGNALED(status))
      note += std::string(" (") + strsignal(WTERMSIG(status)) + ")";
    // The others not reaped yet may have exited too (ranks failing for a
    // common cause, e.g. too few devices): name only those still running.
    size_t running = 0;
    for (size_t r = 0; r < pids.size(); ++r)
      running += !reaped[r] && stillRunning(pids[r]);
    if (running > 0)
      note += "; ending the other " + std::to_string(running) +
              " rank(s) still running";
    else if (left > 0)
      note +=
          "; the other " + std::to_string(left) + " rank(s) had exited already";
    std::fprintf(stderr, "%s\n", note.c_str());
    std::fflush(stderr);
    if (left > 0)
      ::kill(-group, SIGKILL);
  }
  if (failed < 0 && result.error.empty())
    result.status = gFirstSignal != 0 ? 128 + gFirstSignal : 0;
  result.failedRank = failed;
  result.stopSignal = gFirstSignal;
  return result;
}

} // namespace loom::cli
