//===- lr_schedule.h - Learning-rate schedules for training -----*- C++ -*-===//
//
// Linear warmup followed by a constant, cosine, linear or
// warmup-stable-decay (WSD) learning rate, as nanoGPT / llm.c (cosine),
// Megatron-LM (--lr-decay-style constant|linear|cosine|WSD) and torchtitan
// (warmup + decay_ratio) schedule it. Steps are 0-based; the schedule
// depends only on the step number, so a resumed run gets the same rates as
// an uninterrupted one.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_LR_SCHEDULE_H
#define LOOM_RUNTIME_CORE_LR_SCHEDULE_H

#include <cstdint>
#include <string>

namespace loom {

struct LrSchedule {
  enum class Kind { Constant, Cosine, Linear, WSD };
  /// Peak learning rate (after warmup).
  double lr = 1e-3;
  /// Where the decay ends (at step totalSteps).
  double minLr = 0.0;
  /// Steps of linear warmup: step s < warmup gets lr * (s + 1) / warmup.
  int64_t warmup = 0;
  Kind kind = Kind::Cosine;
  /// The step count the schedule spans (warmup included).
  int64_t totalSteps = 1;
  /// WSD: the share of the steps after warmup that decays (the last ones);
  /// 0 < decayFraction <= 1.
  double decayFraction = 0.2;

  /// The learning rate of 0-based step `s`, with
  /// p = clamp((s - W) / max(1, S - W), 0, 1):
  ///   s < W:     lr * (s + 1) / W
  ///   constant:  lr
  ///   cosine:    minLr + 0.5 * (1 + cos(pi * p)) * (lr - minLr)
  ///   linear:    minLr + (1 - p) * (lr - minLr)
  ///   wsd:       lr while p <= 1 - f, then linear to minLr over the last
  ///              f = decayFraction: minLr + (1 - d) * (lr - minLr),
  ///              d = (p - (1 - f)) / f
  double at(int64_t s) const;

  /// "constant", "cosine", "linear", "wsd".
  static const char *name(Kind kind);
  /// The kind named `text` (one of name()'s); false when none is.
  static bool parse(const std::string &text, Kind &kind);
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_LR_SCHEDULE_H
