//===- Placement.h - Ranks <-> (dp, tp, pp) and nodes -----------*- C++ -*-===//
//
// Where each rank of a dp x tp x pp mesh sits. The compiler writes the mesh
// as (pp, dp, tp) and the runtime lays ranks out row-major over it (first
// axis slowest; runtime/core/communicator.h), so
//
//     rank = tp + T·(dp + D·pp)
//
// tp varies fastest: a TP group is T consecutive ranks and stays inside a
// node when T divides --gpus-per-node (its all-reduces sit on the critical
// path of every layer); dp comes next (gradient traffic, overlapped with
// the backward pass); pp is slowest, so the point-to-point activations are
// what crosses nodes first. This is Megatron-LM's rank order.
// `loom plan` costs each axis's collectives on the links this placement
// gives them; `loom compile --report` prints it.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TOOLS_LOOM_PLACEMENT_H
#define LOOM_TOOLS_LOOM_PLACEMENT_H

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <vector>

namespace loom::plan {

enum class Axis { DP, TP, PP };
const char *name(Axis axis);

/// Rank <-> (dp, tp, pp) coordinates and rank -> node.
struct Placement {
  int64_t dp = 1, tp = 1, pp = 1, gpusPerNode = 1;

  int64_t worldSize() const { return dp * tp * pp; }
  int64_t rank(int64_t d, int64_t t, int64_t p) const;
  /// (dp, tp, pp) coordinates of `rank`.
  void coordinates(int64_t rank, int64_t &d, int64_t &t, int64_t &p) const;
  /// The ranks of `rank`'s group along `axis`, in axis order.
  std::vector<int64_t> group(Axis axis, int64_t rank) const;
  /// Whether some group along `axis` spans more than one node.
  bool crossesNodes(Axis axis) const;
  int64_t node(int64_t rank) const { return rank / gpusPerNode; }
};

/// The placement formula, node count and, per axis, the groups holding
/// ranks of node 0 and whether any group of that axis crosses nodes.
void printPlacementGroups(llvm::raw_ostream &os, const Placement &placement);

/// One row per rank (node, pp, dp, tp), for the first `maxRows` ranks.
void printRankTable(llvm::raw_ostream &os, const Placement &placement,
                    int64_t maxRows);

} // namespace loom::plan

#endif // LOOM_TOOLS_LOOM_PLACEMENT_H
