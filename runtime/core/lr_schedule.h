//===- lr_schedule.h - Learning-rate schedules for training -----*- C++ -*-===//
//
// Linear warmup followed by a constant or cosine-decayed learning rate, as
// nanoGPT / llm.c schedule it. Steps are 0-based; the schedule depends only
// on the step number, so a resumed run gets the same rates as an
// uninterrupted one.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_LR_SCHEDULE_H
#define LOOM_RUNTIME_CORE_LR_SCHEDULE_H

#include <cstdint>

namespace loom {

struct LrSchedule {
  enum class Kind { Constant, Cosine };
  /// Peak learning rate (after warmup).
  double lr = 1e-3;
  /// Where the cosine ends (at step totalSteps).
  double minLr = 0.0;
  /// Steps of linear warmup: step s < warmup gets lr * (s + 1) / warmup.
  int64_t warmup = 0;
  Kind kind = Kind::Cosine;
  /// The step count the cosine spans (warmup included).
  int64_t totalSteps = 1;

  /// The learning rate of 0-based step `s`:
  ///   s < W:     lr * (s + 1) / W
  ///   constant:  lr
  ///   cosine:    p = clamp((s - W) / max(1, S - W), 0, 1),
  ///              minLr + 0.5 * (1 + cos(pi * p)) * (lr - minLr)
  double at(int64_t s) const;
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_LR_SCHEDULE_H
