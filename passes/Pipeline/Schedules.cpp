//===- Schedules.cpp - GPipe, 1F1B and interleaved 1F1B ---------*- C++ -*-===//

#include "passes/Pipeline/Schedules.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::loom;

std::optional<ScheduleKind> mlir::loom::parseScheduleKind(StringRef name) {
  if (name == "gpipe")
    return ScheduleKind::GPipe;
  if (name == "1f1b")
    return ScheduleKind::OneFOneB;
  if (name == "interleaved")
    return ScheduleKind::Interleaved;
  return std::nullopt;
}

StringRef mlir::loom::scheduleKindName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved:
    return "interleaved";
  }
  return "?";
}

SmallVector<PipelineAction>
mlir::loom::buildStageActions(ScheduleKind kind, int64_t stage, int64_t p,
                              int64_t v, int64_t m) {
  SmallVector<PipelineAction> actions;
  auto forward = [&](int64_t chunk, int64_t mb) {
    actions.push_back({false, chunk, mb});
  };
  auto backward = [&](int64_t chunk, int64_t mb) {
    actions.push_back({true, chunk, mb});
  };
  switch (kind) {
  case ScheduleKind::GPipe:
    // 1. Every forward, then every backward (in micro-batch order, so both
    //    neighbours see each boundary's messages in the same order).
    for (int64_t c = 0; c < v; ++c)
      for (int64_t i = 0; i < m; ++i)
        forward(c, i);
    for (int64_t c = v - 1; c >= 0; --c)
      for (int64_t i = 0; i < m; ++i)
        backward(c, i);
    return actions;
  case ScheduleKind::OneFOneB: {
    // 1. Warm-up: p - s - 1 forwards; 2. steady state: one forward, one
    //    backward; 3. cool-down: the remaining backwards. At most p - s
    //    micro-batches are in flight on stage s.
    int64_t warmup = std::min(p - stage - 1, m);
    for (int64_t i = 0; i < warmup; ++i)
      forward(0, i);
    for (int64_t i = 0; i < m - warmup; ++i) {
      forward(0, warmup + i);
      backward(0, i);
    }
    for (int64_t i = m - warmup; i < m; ++i)
      backward(0, i);
    return actions;
  }
  case ScheduleKind::Interleaved: {
    // Megatron-LM's order: the k-th forward of a stage runs chunk
    // (k / p) mod v on micro-batch (k / (p v)) p + k mod p, backwards visit
    // the chunks in reverse. 1. Warm-up: 2 (p - s - 1) + (v - 1) p
    // forwards (all of them when m = p); 2. steady 1F1B; 3. cool-down.
    int64_t total = m * v;
    int64_t warmup =
        m == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
    auto chunkOf = [&](int64_t k, bool isForward) {
      int64_t c = (k % (p * v)) / p;
      return isForward ? c : v - 1 - c;
    };
    auto microbatchOf = [&](int64_t k) { return (k / (p * v)) * p + k % p; };
    for (int64_t k = 0; k < warmup; ++k)
      forward(chunkOf(k, true), microbatchOf(k));
    for (int64_t i = 0; i < total - warmup; ++i) {
      int64_t k = warmup + i;
      forward(chunkOf(k, true), microbatchOf(k));
      backward(chunkOf(i, false), microbatchOf(i));
    }
    for (int64_t i = total - warmup; i < total; ++i)
      backward(chunkOf(i, false), microbatchOf(i));
    return actions;
  }
  }
  return actions;
}

double mlir::loom::analyticBubbleFraction(ScheduleKind kind, int64_t p,
                                          int64_t v, int64_t m) {
  if (kind != ScheduleKind::Interleaved)
    v = 1;
  return double(p - 1) / double(v * m + p - 1);
}
