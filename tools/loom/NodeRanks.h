//===- NodeRanks.h - This node's ranks of a job -----------------*- C++ -*-===//
//
// `loom train|eval --backend cuda` starts its ranks itself (ChildProcess.h),
// NCCL bootstrapping through a file (loom-run's LOOM_NCCL_ID_FILE). On one
// node that file sits in loom's temporary directory; a job over N nodes
// runs the same `loom` command on every node with --nodes N --node-rank R
// and --rendezvous F, a fresh path that every node sees (a shared file
// system), as torchrun's --nnodes / --node-rank / rendezvous: node R starts
// local ranks 0..L-1 (L = world size / N) as world ranks R*L .. R*L+L-1,
// local rank l on GPU l, and global rank 0 writes the ncclUniqueId to F.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TOOLS_LOOM_NODERANKS_H
#define LOOM_TOOLS_LOOM_NODERANKS_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::cli {

struct NodeRanks {
  int64_t worldSize = 1, nodes = 1, nodeRank = 0, localRanks = 1;
  /// Where the ranks meet: the ncclUniqueId's file (empty: one node and
  /// no --rendezvous; the launcher picks a private path).
  std::string rendezvous;
};

/// This node's ranks of a job of `worldSize` ranks on `backend`, from the
/// --nodes / --node-rank / --rendezvous `values` (absent: one node). False with
/// `error` (what is wrong and the fix) for values that do not fit: not
/// integers, a node rank out of range, a world the nodes do not divide, several
/// nodes without --rendezvous or on
/// --backend cpu (whose ranks mpirun starts), or, on node 0, a rendezvous
/// file that already exists (a finished job's id would lead the other
/// nodes astray).
bool planNodeRanks(const std::map<std::string, std::string> &values,
                   int64_t worldSize, const std::string &backend,
                   NodeRanks &out, std::string &error);

/// The environment that local rank `localRank` of `node` adds
/// ("NAME=value"): loom-run's LOOM_RANK, LOOM_WORLD_SIZE, LOOM_LOCAL_RANK,
/// LOOM_LOCAL_WORLD_SIZE and LOOM_NCCL_ID_FILE.
std::vector<std::string> rankEnvironment(const NodeRanks &node,
                                         int64_t localRank);

} // namespace loom::cli

#endif // LOOM_TOOLS_LOOM_NODERANKS_H
