//===- trace.h - Chrome / Perfetto trace writer -----------------*- C++ -*-===//
//
// Collects complete events ("ph": "X") and writes them as the Chrome trace
// JSON object format, {"traceEvents": [...]}, which chrome://tracing and
// ui.perfetto.dev open. Times are microseconds from the first event's origin;
// pid is the rank, tid the stream (0 = compute).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_TRACE_H
#define LOOM_RUNTIME_CORE_TRACE_H

#include "runtime/core/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

class TraceWriter {
public:
  /// `originNs` is the steady-clock time that becomes ts = 0.
  explicit TraceWriter(int64_t originNs) : origin(originNs) {}

  /// Records a complete event from steady-clock times in nanoseconds. `cat`
  /// is "compute", "communication" or "data"; a non-empty `op` (the
  /// instruction's opcode) is written as the event's args.op, so a trace
  /// can be summed per kernel family (bench/trace_breakdown.py). `flops`
  /// and `bytes`, when not negative, are written as args.flops and
  /// args.bytes: what the span must at least do (instruction_cost.h).
  void addComplete(const std::string &name, const char *cat, int64_t startNs,
                   int64_t endNs, int64_t pid, int64_t tid = 0,
                   std::string op = std::string(), double flops = -1,
                   int64_t bytes = -1);

  /// The device's peak rate (TFLOP/s) and memory bandwidth (GB/s), written
  /// as the trace's otherData.peak_tflops / peak_gbps when positive: the
  /// roofline bench/trace_breakdown.py holds the spans to.
  void setDevicePeaks(double tflops, double gbps) {
    peakTflops = tflops;
    peakGbps = gbps;
  }

  size_t size() const { return events.size(); }

  /// Writes the trace to `path` (temporary file, then rename).
  Status write(const std::string &path) const;

private:
  struct Event {
    std::string name;
    const char *cat;
    std::string op;
    int64_t startNs, endNs, pid, tid;
    double flops;
    int64_t bytes;
  };
  int64_t origin;
  double peakTflops = 0, peakGbps = 0;
  std::vector<Event> events;
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_TRACE_H
