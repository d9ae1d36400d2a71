//===- CudaCollectiveWatchdogTest.cpp - The NCCL watchdog's verdicts ------===//
//
// runtime/cuda/collective_watchdog.h with a handler that records what it
// would end the process with: a call past the limit is reported once, by
// name; calls that complete (on the host, or on a stream) never are; an
// asynchronous NCCL error is reported with what was pending. The whole
// path (a peer that stops responding ends the job) is
// test/e2e/train-cuda-emulated-nccl.test's. Skipped without a device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "runtime/cuda/collective_watchdog.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace loom;
using namespace loom::test;

namespace {

/// What the watchdog reported, and how many times.
struct Verdicts {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::string> messages;

  cuda::CollectiveWatchdog::FailureHandler handler() {
    return [this](const std::string &m) {
      std::lock_guard<std::mutex> lock(mutex);
      messages.push_back(m);
      arrived.notify_all();
    };
  }
  /// Waits up to `seconds` for a first report.
  bool waitForOne(double seconds) {
    std::unique_lock<std::mutex> lock(mutex);
    return arrived.wait_for(lock, std::chrono::duration<double>(seconds),
                            [this] { return !messages.empty(); });
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return messages.size();
  }
};

void sleepSeconds(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

class CudaCollectiveWatchdogTest : public CudaTest {};

TEST_F(CudaCollectiveWatchdogTest, ACallPastTheLimitIsReportedOnceByName) {
  Verdicts verdicts;
  cuda::CollectiveWatchdog watchdog(0.1, nullptr, verdicts.handler());
  const auto start = std::chrono::steady_clock::now();
  watchdog.begin("all_reduce of 8 F32 over mesh axes dp");
  ASSERT_TRUE(verdicts.waitForOne(10.0)) << "no report 10 s after 0.1 s";
  const double after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_GE(after, 0.1);
  sleepSeconds(0.5);
  ASSERT_EQ(verdicts.count(), 1u) << "reported more than once";
  const std::string &m = verdicts.messages[0];
  EXPECT_NE(m.find("NCCL all_reduce of 8 F32 over mesh axes dp has not "
                   "completed"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("the host is still in the call"), std::string::npos) << m;
  EXPECT_NE(m.find("LOOM_NCCL_TIMEOUT, is 0.10 s"), std::string::npos) << m;
  EXPECT_NE(m.find("another rank has probably exited"), std::string::npos) << m;
}

TEST_F(CudaCollectiveWatchdogTest, CompletedCallsAreNeverReported) {
  Verdicts verdicts;
  cuda::CollectiveWatchdog watchdog(
      0.1, [] { return std::string(); }, verdicts.handler());
  // On the host (ncclCommInitRank, splits) and on a stream (collectives),
  // many times over the limit in all.
  for (int i = 0; i < 40; ++i) {
    const auto host = watchdog.begin("ncclCommSplit (a point-to-point lane)");
    watchdog.finished(host);
    const auto device = watchdog.begin("all_gather of 4 BF16 over the world");
    ASSERT_TRUE(watchdog.issued(device, stream).ok());
    sleepSeconds(0.01);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  sleepSeconds(0.5);
  EXPECT_EQ(verdicts.count(), 0u)
      << "reported completed work: " << verdicts.messages[0];
  // The thread has dropped every fired event by now.
  EXPECT_EQ(watchdog.pendingCount(), 0u);
  // A call never begun cannot be issued (a caller's mistake, said).
  const Status s = watchdog.issued(12345, stream);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("NCCL watchdog: call 12345 was not begun"),
            std::string::npos)
      << s.message();
}

TEST_F(CudaCollectiveWatchdogTest, AnAsynchronousNcclErrorIsReportedAtOnce) {
  Verdicts verdicts;
  std::atomic<bool> peerGone{false};
  // Far longer than the test: only the error can end it.
  cuda::CollectiveWatchdog watchdog(
      3600.0,
      [&] {
        return peerGone ? std::string("remote process exited or there was "
                                      "a network error")
                        : std::string();
      },
      verdicts.handler());
  watchdog.begin("recv of 16 BF16 from world rank 1");
  sleepSeconds(0.2);
  EXPECT_EQ(verdicts.count(), 0u);
  peerGone = true;
  ASSERT_TRUE(verdicts.waitForOne(10.0)) << "the error was not reported";
  const std::string &m = verdicts.messages[0];
  EXPECT_NE(m.find("NCCL reported an error on this rank's communicators: "
                   "remote process exited"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("(pending: recv of 16 BF16 from world rank 1)"),
            std::string::npos)
      << m;
}

} // namespace
