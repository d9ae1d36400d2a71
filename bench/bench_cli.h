//===- bench_cli.h - Flags and error exits of the benchmarks ----*- C++ -*-===//
//
// The CUDA benchmarks (gemm_cublaslt.cpp, attention_cuda.cpp) take the same
// kind of flags (`--batch 16 --seq 1024 ... --json F`) and end the same way
// on an error: one line naming the tool, exit 1. They are run by
// scripts/gpu-check on a machine we get for minutes, so a mistyped number
// must stop the run with a message, not silently become 0.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_BENCH_BENCH_CLI_H
#define LOOM_BENCH_BENCH_CLI_H

#include "runtime/core/status.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom::bench {

/// The argument after `flag` in argv, or nullptr when the flag is absent.
inline const char *flagString(int argc, char **argv, const char *flag) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0)
      return argv[i + 1];
  return nullptr;
}

/// The integer after `flag` (`dflt` when absent); exits 2 with a message
/// naming `tool`, the flag and the value when it is not an integer >= `min`.
inline int64_t flagInteger(const char *tool, int argc, char **argv,
                           const char *flag, int64_t dflt, int64_t min = 1) {
  const char *text = flagString(argc, argv, flag);
  if (!text)
    return dflt;
  char *end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min) {
    std::fprintf(stderr, "%s: %s takes an integer >= %lld, got '%s'\n", tool,
                 flag, static_cast<long long>(min), text);
    std::exit(2);
  }
  return static_cast<int64_t>(v);
}

} // namespace loom::bench

/// Returns 1 from main() after printing `tool: message` when `expr` (a
/// loom::Status) failed.
#define LOOM_BENCH_CHECK(tool, expr)                                           \
  do {                                                                         \
    ::loom::Status s_ = (expr);                                                \
    if (!s_.ok()) {                                                            \
      std::fprintf(stderr, "%s: %s\n", tool, s_.message().c_str());            \
      return 1;                                                                \
    }                                                                          \
  } while (0)

/// LOOM_BENCH_CHECK for a CUDA runtime call.
#define LOOM_BENCH_CUDA(tool, call)                                            \
  LOOM_BENCH_CHECK(tool, cudaSuccess == (call)                                 \
                             ? ::loom::Status::success()                       \
                             : ::loom::Status::error(#call " failed"))

#endif // LOOM_BENCH_BENCH_CLI_H
