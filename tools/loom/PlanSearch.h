//===- PlanSearch.h - The search of `loom plan` -----------------*- C++ -*-===//
//
// Enumerates every valid plan of a model on a cluster (PlanModel.h's
// checkPlan), predicts each (evaluatePlan) and keeps what the report needs:
// the plans that fit, fastest first, and per (zero, tp) family the fastest
// and the smallest plan.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TOOLS_LOOM_PLANSEARCH_H
#define LOOM_TOOLS_LOOM_PLANSEARCH_H

#include "tools/loom/PlanModel.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace loom::plan {

/// What `loom plan` was asked.
struct PlanOptions {
  std::string config;
  Cluster cluster;
  Workload work;
  int64_t top = 10;
  bool json = false;
  /// Restrictions: only plans with these values are searched.
  std::optional<int64_t> dp, tp, pp, zero, microbatches, virtualStages;
  std::optional<Schedule> schedule;
  std::optional<Recompute> recompute;
};

/// What the search keeps of one evaluated plan.
struct Candidate {
  Plan plan;
  double stepS = 0, peakBytes = 0, mfu = 0, bubble = 0;
  double tpBytes = 0, dpBytes = 0, ppBytes = 0;
  double modelStateBytes = 0, activationBytes = 0, otherBytes = 0;
};

/// The plans of one (zero, tp) family.
struct Family {
  int64_t evaluated = 0, fits = 0;
  std::optional<Candidate> smallest; // the least peak memory
  std::optional<Candidate> fastest;  // the fastest that fits
};

struct SearchResult {
  std::vector<Candidate> fitting;
  std::optional<Candidate> fastest;  // ignoring memory
  std::optional<Candidate> smallest; // the least peak memory
  std::map<std::pair<int, int64_t>, Family> families;
  /// Mesh choices that are never valid, with the reason.
  std::vector<std::string> excluded;
  int64_t evaluated = 0;
  double seconds = 0;
};

/// Ranking: the predicted step; on a tie (communication fully hidden) the
/// plan that sends less, then the one that needs less memory.
bool faster(const Candidate &a, const Candidate &b);

/// Searches every plan `opts` allows (its restrictions included).
SearchResult searchPlans(const ModelShape &model, const PlanOptions &opts);

} // namespace loom::plan

#endif // LOOM_TOOLS_LOOM_PLANSEARCH_H
