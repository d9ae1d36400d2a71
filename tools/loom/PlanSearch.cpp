//===- PlanSearch.cpp - The search of `loom plan` ---------------*- C++ -*-===//
//
// Every mesh dp x tp x pp = G, ZeRO stage, micro-batch count, schedule (with
// virtual stages) and recomputation mode that checkPlan accepts, predicted
// and ranked.
//
//===----------------------------------------------------------------------===//

#include "tools/loom/PlanSearch.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <tuple>

using namespace loom::plan;

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0)
      out.push_back(d);
  return out;
}

} // namespace

bool loom::plan::faster(const Candidate &a, const Candidate &b) {
  auto key = [](const Candidate &c) {
    return std::make_tuple(c.stepS, c.tpBytes + c.dpBytes + c.ppBytes,
                           c.peakBytes, c.plan.zero, c.plan.microbatches,
                           c.plan.pp, c.plan.tp);
  };
  return key(a) < key(b);
}

namespace {

Candidate summarize(const Plan &plan, const PlanCost &cost) {
  Candidate c;
  c.plan = plan;
  c.stepS = cost.stepS;
  c.peakBytes = cost.peakBytes;
  c.mfu = cost.mfu;
  c.bubble = cost.bubble;
  c.tpBytes = cost.tpBytes;
  c.dpBytes = cost.dpBytes;
  c.ppBytes = cost.ppBytes;
  const StageMemory &st = cost.stages[cost.peakStage];
  c.modelStateBytes = st.modelStateBytes;
  c.activationBytes = st.activationBytes;
  c.otherBytes = st.gatheredBytes + st.workspaceBytes;
  return c;
}

} // namespace

SearchResult loom::plan::searchPlans(const ModelShape &model,
                                     const PlanOptions &opts) {
  auto start = std::chrono::steady_clock::now();
  SearchResult result;
  const Cluster &cluster = opts.cluster;
  const Workload &work = opts.work;
  const int64_t G = cluster.gpus, L = model.layers;
  auto str = [](int64_t v) { return std::to_string(v); };
  std::set<std::string> excludedOnce;
  auto exclude = [&](const std::string &why) {
    if (excludedOnce.insert(why).second)
      result.excluded.push_back(why);
  };

  for (int64_t tp : divisors(G)) {
    if (opts.tp && *opts.tp != tp)
      continue;
    if (tp > cluster.gpusPerNode) {
      exclude("tp=" + str(tp) + ": more than --gpus-per-node " +
              str(cluster.gpusPerNode) + " (a TP group stays inside a node)");
      continue;
    }
    if (model.heads % tp) {
      exclude("tp=" + str(tp) + ": does not divide n_head " + str(model.heads));
      continue;
    }
    for (int64_t pp : divisors(G / tp)) {
      if (opts.pp && *opts.pp != pp)
        continue;
      int64_t dp = G / (tp * pp);
      if (opts.dp && *opts.dp != dp)
        continue;
      if (pp > L) {
        exclude("pp=" + str(pp) + ": more stages than n_layer " + str(L));
        continue;
      }
      if (work.batch % dp) {
        exclude("dp=" + str(dp) + " (tp=" + str(tp) + " pp=" + str(pp) +
                "): does not divide --batch " + str(work.batch));
        continue;
      }
      for (int zero = 0; zero <= 3; ++zero) {
        if (opts.zero ? *opts.zero != zero : (dp == 1 && zero > 0))
          continue; // ZeRO over one rank is DDP
        for (int64_t m : divisors(work.batch / dp)) {
          if (opts.microbatches && *opts.microbatches != m)
            continue;
          // The schedules: one for pp = 1 (no pipeline).
          std::vector<std::pair<Schedule, int64_t>> schedules;
          if (pp == 1) {
            schedules.push_back({Schedule::OneFOneB, 1});
          } else {
            schedules.push_back({Schedule::GPipe, 1});
            if (m >= pp)
              schedules.push_back({Schedule::OneFOneB, 1});
            if (L % pp == 0 && m % pp == 0)
              for (int64_t v : divisors(L / pp))
                if (v >= 2)
                  schedules.push_back({Schedule::Interleaved, v});
          }
          for (auto [schedule, v] : schedules) {
            if (pp > 1 && opts.schedule && *opts.schedule != schedule)
              continue;
            if (opts.virtualStages && *opts.virtualStages != v)
              continue;
            for (Recompute rc :
                 {Recompute::None, Recompute::Selective, Recompute::Full}) {
              if (opts.recompute && *opts.recompute != rc)
                continue;
              Plan plan{dp, tp, pp, zero, m, schedule, v, rc};
              if (!checkPlan(model, cluster, work, plan).empty())
                continue;
              PlanCost cost = evaluatePlan(model, cluster, work, plan);
              Candidate c = summarize(plan, cost);
              ++result.evaluated;
              Family &family = result.families[{zero, tp}];
              ++family.evaluated;
              if (!family.smallest || c.peakBytes < family.smallest->peakBytes)
                family.smallest = c;
              if (!result.smallest || c.peakBytes < result.smallest->peakBytes)
                result.smallest = c;
              if (!result.fastest || faster(c, *result.fastest))
                result.fastest = c;
              if (cost.fits) {
                ++family.fits;
                if (!family.fastest || faster(c, *family.fastest))
                  family.fastest = c;
                result.fitting.push_back(c);
              }
            }
          }
        }
      }
    }
  }
  std::sort(result.fitting.begin(), result.fitting.end(), faster);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}
