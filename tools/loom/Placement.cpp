//===- Placement.cpp - Ranks <-> (dp, tp, pp) and nodes ---------*- C++ -*-===//
//
// See Placement.h for the layout and why it is ordered so.
//
//===----------------------------------------------------------------------===//

#include "tools/loom/Placement.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <set>
#include <string>

using namespace loom::plan;

const char *loom::plan::name(Axis axis) {
  switch (axis) {
  case Axis::DP:
    return "dp";
  case Axis::TP:
    return "tp";
  case Axis::PP:
    return "pp";
  }
  return "?";
}

int64_t Placement::rank(int64_t d, int64_t t, int64_t p) const {
  return t + tp * (d + dp * p);
}

void Placement::coordinates(int64_t r, int64_t &d, int64_t &t,
                            int64_t &p) const {
  t = r % tp;
  d = (r / tp) % dp;
  p = r / (tp * dp);
}

std::vector<int64_t> Placement::group(Axis axis, int64_t r) const {
  int64_t d, t, p;
  coordinates(r, d, t, p);
  std::vector<int64_t> ranks;
  switch (axis) {
  case Axis::DP:
    for (int64_t i = 0; i < dp; ++i)
      ranks.push_back(rank(i, t, p));
    break;
  case Axis::TP:
    for (int64_t i = 0; i < tp; ++i)
      ranks.push_back(rank(d, i, p));
    break;
  case Axis::PP:
    for (int64_t i = 0; i < pp; ++i)
      ranks.push_back(rank(d, t, i));
    break;
  }
  return ranks;
}

bool Placement::crossesNodes(Axis axis) const {
  for (int64_t r = 0; r < worldSize(); ++r) {
    std::vector<int64_t> g = group(axis, r);
    // Each group once: from its first member.
    if (g.front() != r)
      continue;
    for (int64_t member : g)
      if (node(member) != node(r))
        return true;
  }
  return false;
}

namespace {

std::string groupText(const std::vector<int64_t> &ranks) {
  std::string s = "[";
  auto add = [&](int64_t r) {
    if (s.size() > 1)
      s += " ";
    s += std::to_string(r);
  };
  if (ranks.size() <= 8) {
    for (int64_t r : ranks)
      add(r);
  } else {
    for (size_t i = 0; i < 3; ++i)
      add(ranks[i]);
    s += " ...";
    add(ranks.back());
  }
  return s + "]";
}

} // namespace

void loom::plan::printPlacementGroups(llvm::raw_ostream &os,
                                      const Placement &placement) {
  const int64_t world = placement.worldSize();
  const int64_t perNode = placement.gpusPerNode;
  const int64_t nodes = (world + perNode - 1) / perNode;
  const int64_t firstNode = std::min(world, perNode);
  os << "placement: rank = tp + " << placement.tp << "*(dp + " << placement.dp
     << "*pp), tp fastest so a TP group stays inside a node; " << perNode
     << " GPUs per node, " << nodes << " node" << (nodes > 1 ? "s" : "")
     << "\n";
  os << "  node 0 = ranks 0-" << firstNode - 1 << "\n";
  for (Axis axis : {Axis::TP, Axis::DP, Axis::PP}) {
    std::vector<std::vector<int64_t>> groups;
    std::set<int64_t> seen;
    for (int64_t r = 0; r < firstNode; ++r) {
      std::vector<int64_t> g = placement.group(axis, r);
      if (seen.insert(g.front()).second)
        groups.push_back(g);
    }
    os << "  " << name(axis) << " groups (size " << groups.front().size()
       << ") with ranks in node 0:";
    for (size_t i = 0; i < std::min<size_t>(groups.size(), 4); ++i)
      os << " " << groupText(groups[i]);
    if (groups.size() > 4)
      os << " (+" << groups.size() - 4 << " more)";
    os << "; "
       << (placement.crossesNodes(axis) ? "crosses nodes" : "inside a node")
       << "\n";
  }
}

void loom::plan::printRankTable(llvm::raw_ostream &os,
                                const Placement &placement, int64_t maxRows) {
  const int64_t world = placement.worldSize();
  os << "  rank  node  pp  dp  tp\n";
  for (int64_t r = 0; r < std::min(world, maxRows); ++r) {
    int64_t d, t, p;
    placement.coordinates(r, d, t, p);
    os << llvm::format("  %4lld  %4lld  %2lld  %2lld  %2lld\n", (long long)r,
                       (long long)placement.node(r), (long long)p,
                       (long long)d, (long long)t);
  }
  if (world > maxRows)
    os << "  ... (" << world - maxRows << " more ranks)\n";
}
