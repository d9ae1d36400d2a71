//===- PlanReport.h - What `loom plan` prints -------------------*- C++ -*-===//
//
// The text report and the JSON of a search (PlanSearch.h).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TOOLS_LOOM_PLANREPORT_H
#define LOOM_TOOLS_LOOM_PLANREPORT_H

#include "tools/loom/PlanSearch.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace loom::plan {

/// The whole text report: model, cluster, search time, the top plans,
/// the fastest plan per (zero, tp) family, why rejected families do not
/// fit, the best plan's memory and time term by term, and its placement.
/// `result` has at least one plan that fits.
void printPlanReport(llvm::raw_ostream &os, const ModelShape &model,
                     const PlanOptions &opts, const SearchResult &result,
                     double importSeconds);

/// The best plan as JSON (the plan format plus the breakdown per stage).
void printPlanJson(llvm::raw_ostream &os, const ModelShape &model,
                   const PlanOptions &opts, const SearchResult &result,
                   double importSeconds);

/// Each (zero, tp) family with no plan that fits, and its smallest plan.
void printRejected(llvm::raw_ostream &os, const SearchResult &result,
                   const PlanOptions &opts);

/// The error when nothing fits: the smallest memory any plan needs.
std::string noPlanFitsMessage(const SearchResult &result,
                              const PlanOptions &opts);

} // namespace loom::plan

#endif // LOOM_TOOLS_LOOM_PLANREPORT_H
