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
  switch (kind) {
  case Kind::Cosine:
    return minLr + 0.5 * (1.0 + std::cos(M_PI * p)) * (lr - minLr);
  case Kind::Linear:
    return minLr + (1.0 - p) * (lr - minLr);
  case Kind::WSD: {
    const double stable = 1.0 - decayFraction;
    if (p <= stable)
      return lr;
    const double d = std::min(1.0, (p - stable) / decayFraction);
    return minLr + (1.0 - d) * (lr - minLr);
  }
  case Kind::Constant:
    break;
  }
  return lr;
}

const char *LrSchedule::name(Kind kind) {
  switch (kind) {
  case Kind::Constant:
    return "constant";
  case Kind::Cosine:
    return "cosine";
  case Kind::Linear:
    return "linear";
  case Kind::WSD:
    return "wsd";
  }
  return "?";
}

bool LrSchedule::parse(const std::string &text, Kind &kind) {
  for (Kind k : {Kind::Constant, Kind::Cosine, Kind::Linear, Kind::WSD})
    if (text == name(k)) {
      kind = k;
      return true;
    }
  return false;
}

} // namespace loom
