//===- trace.cpp - Chrome / Perfetto trace writer ---------------*- C++ -*-===//
#include "runtime/core/trace.h"

#include "runtime/core/json.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace loom {

void TraceWriter::addComplete(const std::string &name, const char *cat,
                              int64_t startNs, int64_t endNs, int64_t pid,
                              int64_t tid, std::string op, double flops,
                              int64_t bytes) {
  events.push_back(
      {name, cat, std::move(op), startNs, endNs, pid, tid, flops, bytes});
}

Status TraceWriter::write(const std::string &path) const {
  JsonValue list = JsonValue::array();
  for (const Event &e : events) {
    JsonValue ev = JsonValue::object();
    ev.set("name", JsonValue::string(e.name));
    ev.set("cat", JsonValue::string(e.cat));
    ev.set("ph", JsonValue::string("X"));
    ev.set("ts", JsonValue::number((e.startNs - origin) / 1000.0));
    ev.set("dur", JsonValue::number((e.endNs - e.startNs) / 1000.0));
    ev.set("pid", JsonValue::integer(e.pid));
    ev.set("tid", JsonValue::integer(e.tid));
    if (!e.op.empty() || e.flops >= 0 || e.bytes >= 0) {
      JsonValue args = JsonValue::object();
      if (!e.op.empty())
        args.set("op", JsonValue::string(e.op));
      if (e.flops >= 0)
        args.set("flops", JsonValue::number(e.flops));
      if (e.bytes >= 0)
        args.set("bytes", JsonValue::integer(e.bytes));
      ev.set("args", std::move(args));
    }
    list.push(std::move(ev));
  }
  JsonValue root = JsonValue::object();
  root.set("traceEvents", std::move(list));
  root.set("displayTimeUnit", JsonValue::string("ms"));
  if (peakTflops > 0 || peakGbps > 0) {
    JsonValue other = JsonValue::object();
    if (peakTflops > 0)
      other.set("peak_tflops", JsonValue::number(peakTflops));
    if (peakGbps > 0)
      other.set("peak_gbps", JsonValue::number(peakGbps));
    root.set("otherData", std::move(other));
  }
  const std::string text = writeJson(root) + "\n";

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE *f = std::fopen(tmp.c_str(), "wb");
  LOOM_CHECK(f,
             "cannot create trace '" << tmp << "': " << std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    LOOM_ERROR("cannot write trace '" << tmp << "' (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    LOOM_ERROR("cannot rename '" << tmp << "' to '" << path
                                 << "': " << std::strerror(err));
  }
  return Status::success();
}

} // namespace loom
