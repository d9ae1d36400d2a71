//===- lr_schedule.cpp - Learning-rate schedules for training ---*- C++ -*-===//
#include "runtime/core/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace loom {

double LrSchedule::at(int64_t s) const {
  if (s < warmup)
    return lr * static_cast<double>(s + 1) / static_cast<double>(warmup);
  if (kind == Kind::Constant)
    return lr;
  const double span =
      static_cast<double>(std::max<int64_t>(1, totalSteps - warmup));
  const double p = std::clamp(static_cast<double>(s - warmup) / span, 0.0, 1.0);
  return minLr + 0.5 * (1.0 + std::cos(M_PI * p)) * (lr - minLr);
}

} // namespace loom
