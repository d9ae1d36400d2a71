//===- status.h - Error type and checking macros ----------------*- C++ -*-===//
//
// Everything in the runtime that can fail on input (files, indices, shapes
// read from disk) returns a loom::Status instead of aborting, so that a corrupt
// checkpoint or token file produces a message the user can act on rather than
// a crash deep inside a kernel. The macros record file and line, in the manner
// of nccl-tests' `common.h`, but return the error to the caller instead of
// exiting.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_STATUS_H
#define LOOM_RUNTIME_CORE_STATUS_H

#include <sstream>
#include <string>
#include <utility>

namespace loom {

/// The result of an operation that can fail: either ok, or an error carrying a
/// human-readable message and the source location that raised it.
class [[nodiscard]] Status {
public:
  /// Constructs an ok status.
  Status() = default;

  /// Returns an ok status.
  static Status success() { return Status(); }

  /// Returns an error with `message`, raised at `file`:`line`.
  static Status error(std::string message, const char *file = nullptr,
                      int line = 0) {
    Status s;
    s.failed = true;
    s.msg = std::move(message);
    if (file) {
      s.where = file;
      s.where += ":" + std::to_string(line);
    }
    return s;
  }

  /// True when the operation succeeded.
  bool ok() const { return !failed; }
  explicit operator bool() const { return ok(); }

  /// The error message without location ("" when ok).
  const std::string &message() const { return msg; }
  /// The `file:line` that raised the error ("" when ok or unknown).
  const std::string &location() const { return where; }

  /// "message (at file:line)" for logs; "ok" for success.
  std::string toString() const {
    if (!failed)
      return "ok";
    if (where.empty())
      return msg;
    return msg + " (at " + where + ")";
  }

  /// Returns a copy whose message is prefixed with `context`, so callers can
  /// say which file or tensor they were working on when a callee failed.
  Status withContext(const std::string &context) const {
    if (!failed)
      return *this;
    Status s = *this;
    s.msg = context + ": " + msg;
    return s;
  }

private:
  bool failed = false;
  std::string msg;
  std::string where;
};

} // namespace loom

/// Returns an error Status from the enclosing function. The message is built
/// with stream syntax: `LOOM_ERROR("bad magic " << magic)`.
#define LOOM_ERROR(streamExpr)                                                 \
  do {                                                                         \
    std::ostringstream loomErrStream_;                                         \
    loomErrStream_ << streamExpr;                                              \
    return ::loom::Status::error(loomErrStream_.str(), __FILE__, __LINE__);    \
  } while (0)

/// Returns an error Status from the enclosing function unless `cond` holds.
#define LOOM_CHECK(cond, streamExpr)                                           \
  do {                                                                         \
    if (!(cond))                                                               \
      LOOM_ERROR(streamExpr);                                                  \
  } while (0)

/// Evaluates an expression producing a Status and returns it if it failed.
#define LOOM_RETURN_IF_ERROR(expr)                                             \
  do {                                                                         \
    ::loom::Status loomStatus_ = (expr);                                       \
    if (!loomStatus_.ok())                                                     \
      return loomStatus_;                                                      \
  } while (0)

#endif // LOOM_RUNTIME_CORE_STATUS_H
