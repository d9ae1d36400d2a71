//===- collective_watchdog.cpp - Ends a rank whose NCCL hangs -------------===//
#include "runtime/cuda/collective_watchdog.h"

#include "runtime/cuda/check.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace loom::cuda {

namespace {

/// How often the thread looks: often enough to end a stalled rank within a
/// quarter of the limit past it, at most once a second (each look is a
/// cudaEventQuery per pending call).
std::chrono::milliseconds pollInterval(double timeoutSeconds) {
  const double ms = std::clamp(timeoutSeconds * 250.0, 10.0, 1000.0);
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

std::string seconds(double s) {
  std::ostringstream o;
  o.precision(s < 10 ? 2 : 0);
  o << std::fixed << s;
  return o.str();
}

} // namespace

CollectiveWatchdog::CollectiveWatchdog(double timeoutSeconds,
                                       AsyncErrorCheck asyncError,
                                       FailureHandler onFailure)
    : timeout(timeoutSeconds), asyncError(std::move(asyncError)),
      onFailure(std::move(onFailure)) {
  // The thread queries events on this thread's device: without this it
  // would make device 0's context current there (and allocate on it from
  // every rank of the node).
  int device = 0;
  cudaGetDevice(&device);
  thread = std::thread([this, device] {
    cudaSetDevice(device);
    watch();
  });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  thread.join();
  for (cudaEvent_t e : created)
    cudaEventDestroy(e);
}

CollectiveWatchdog::Id CollectiveWatchdog::begin(std::string what) {
  std::lock_guard<std::mutex> lock(mutex);
  // The oldest calls that have completed since the thread's last look go
  // now, so the list (and the events in it) stays as short as the work in
  // flight. From the front only, until one has not: a call costs O(1)
  // queries, not one per call in flight (ZeRO-3 keeps hundreds).
  while (!calls.empty() && calls.front().done &&
         cudaEventQuery(calls.front().done) == cudaSuccess) {
    spare.push_back(calls.front().done);
    calls.pop_front();
  }
  calls.push_back({nextId, std::move(what), Clock::now(), nullptr});
  return nextId++;
}

std::deque<CollectiveWatchdog::Call>::iterator
CollectiveWatchdog::findLocked(Id id) {
  // From the back: the call looked for is almost always the newest.
  auto it = std::find_if(calls.rbegin(), calls.rend(),
                         [id](const Call &c) { return c.id == id; });
  return it == calls.rend() ? calls.end() : std::next(it).base();
}

Status CollectiveWatchdog::issued(Id id, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = findLocked(id);
  LOOM_CHECK(it != calls.end(),
             "NCCL watchdog: call " << id << " was not begun");
  cudaEvent_t event = nullptr;
  if (!spare.empty()) {
    event = spare.back();
    spare.pop_back();
  } else {
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    created.push_back(event);
  }
  const cudaError_t recorded = cudaEventRecord(event, stream);
  if (recorded != cudaSuccess) {
    spare.push_back(event);
    calls.erase(it);
    LOOM_CUDA_CHECK(recorded);
  }
  it->done = event;
  return Status::success();
}

void CollectiveWatchdog::finished(Id id) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = findLocked(id);
  if (it == calls.end())
    return;
  if (it->done)
    spare.push_back(it->done);
  calls.erase(it);
}

size_t CollectiveWatchdog::pendingCount() const {
  std::lock_guard<std::mutex> lock(mutex);
  return calls.size();
}

std::string CollectiveWatchdog::reapLocked(Clock::time_point now) {
  std::string stalled;
  for (auto it = calls.begin(); it != calls.end();) {
    if (it->done) {
      const cudaError_t q = cudaEventQuery(it->done);
      if (q == cudaSuccess) {
        spare.push_back(it->done);
        it = calls.erase(it);
        continue;
      }
      if (q != cudaErrorNotReady && stalled.empty()) {
        // A fault on the device (an earlier kernel's sticky error, say):
        // the call will never complete either.
        stalled = "waiting for NCCL " + it->what + ", CUDA reported " +
                  cudaGetErrorName(q) + " (" + cudaGetErrorString(q) + ")";
      }
    }
    const double age =
        std::chrono::duration<double>(now - it->issuedAt).count();
    if (age > timeout && stalled.empty())
      stalled = "NCCL " + it->what + " has not completed " + seconds(age) +
                " s after this rank issued it (" +
                (it->done ? "on the device" : "the host is still in the call") +
                "; the limit, LOOM_NCCL_TIMEOUT, is " + seconds(timeout) +
                " s): another rank has probably exited, stopped responding "
                "or issued a different collective";
    ++it;
  }
  return stalled;
}

void CollectiveWatchdog::watch() {
  const auto interval = pollInterval(timeout);
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopping) {
    wake.wait_for(lock, interval, [this] { return stopping; });
    if (stopping)
      return;
    std::string message = reapLocked(Clock::now());
    if (message.empty() && asyncError) {
      // Outside the lock: the check may take the communicators' own.
      lock.unlock();
      const std::string error = asyncError();
      lock.lock();
      if (!error.empty()) {
        message =
            "NCCL reported an error on this rank's communicators: " + error;
        if (!calls.empty())
          message += " (pending: " + calls.front().what + ")";
      }
    }
    if (message.empty())
      continue;
    // Report once, outside the lock (the handler ends the process, and may
    // abort communicators that a blocked call on the main thread holds).
    lock.unlock();
    onFailure(message);
    return;
  }
}

} // namespace loom::cuda
