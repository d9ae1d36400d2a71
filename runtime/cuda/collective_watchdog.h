//===- collective_watchdog.h - Ends a rank whose NCCL hangs -----*- C++ -*-===//
//
// A NCCL collective waits on the device for every other rank of its
// communicator. When one of them has exited, hangs, or issued a different
// collective, the others spin forever and the host blocks in the next
// cudaStreamSynchronize: with ranks started by hand (LOOM_RANK) nothing
// ever takes the job down. CollectiveWatchdog is PyTorch's ProcessGroupNCCL
// watchdog (TORCH_NCCL_ASYNC_ERROR_HANDLING) for Loom: a thread that
// watches this rank's NCCL calls and reports, through a handler that ends
// the process, when
//   - one has not completed `timeoutSeconds` after it was issued: still on
//     the device (the event recorded after it on its stream has not
//     fired), or still on the host (a blocking call such as
//     ncclCommInitRank has not returned);
//   - NCCL reports an asynchronous error on one of the communicators
//     (ncclCommGetAsyncError: a peer's connection closed, a network
//     error), which it notices long before the timeout.
//
// The age of a call counts from when the host issued it, as PyTorch's does,
// so it includes the device work queued ahead of it: the limit is meant to
// be minutes (600 s by default, PyTorch's), far above any step.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_COLLECTIVE_WATCHDOG_H
#define LOOM_RUNTIME_CUDA_COLLECTIVE_WATCHDOG_H

#include "runtime/core/status.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cuda_runtime_api.h>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace loom::cuda {

/// loom-run's limit when LOOM_NCCL_TIMEOUT is unset (PyTorch's default).
constexpr double kDefaultNcclTimeoutSeconds = 600.0;

class CollectiveWatchdog {
public:
  /// Says what stalled or failed. In a run it ends the process (the
  /// communicators aborted first); tests record the message. Called at most
  /// once, on the watchdog's thread, which then stops watching.
  using FailureHandler = std::function<void(const std::string &message)>;
  /// A description of an asynchronous error on one of the watched
  /// communicators; empty while there is none. Called on the watchdog's
  /// thread.
  using AsyncErrorCheck = std::function<std::string()>;
  using Id = uint64_t;

  /// Starts the thread. `timeoutSeconds` must be positive.
  CollectiveWatchdog(double timeoutSeconds, AsyncErrorCheck asyncError,
                     FailureHandler onFailure);
  /// Stops the thread and frees the events.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog &) = delete;
  CollectiveWatchdog &operator=(const CollectiveWatchdog &) = delete;

  /// Before a NCCL call: from now on `what` ("all_reduce of 4096 bf16 over
  /// dp") is pending until issued() or finished() says otherwise.
  Id begin(std::string what);
  /// The call returned having queued its work on `stream`: pending until an
  /// event recorded there now fires.
  Status issued(Id id, cudaStream_t stream);
  /// The call completed on the host (or failed there and says so itself).
  void finished(Id id);

  double timeoutSeconds() const { return timeout; }
  /// Calls still pending (tests; work already completed may be counted
  /// until the thread's next look).
  size_t pendingCount() const;

private:
  using Clock = std::chrono::steady_clock;
  struct Call {
    Id id;
    std::string what;
    Clock::time_point issuedAt;
    /// Null while the host is still in the call.
    cudaEvent_t done = nullptr;
  };

  void watch();
  /// Drops every call whose event has fired; the message of the first
  /// that stalled or failed, empty when none did. Holds `mutex`.
  std::string reapLocked(Clock::time_point now);
  /// The call `id`, or calls.end(). Holds `mutex`.
  std::deque<Call>::iterator findLocked(Id id);

  const double timeout;
  const AsyncErrorCheck asyncError;
  const FailureHandler onFailure;
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<Call> calls;           // in issue order
  std::vector<cudaEvent_t> spare;   // recorded-and-fired events to reuse
  std::vector<cudaEvent_t> created; // every event, freed at the end
  Id nextId = 0;
  bool stopping = false;
  std::thread thread;
};

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_COLLECTIVE_WATCHDOG_H
