//===- NodeRanks.cpp - This node's ranks of a job loom starts -------------===//
#include "tools/loom/NodeRanks.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"

namespace loom::cli {

namespace {

/// `flag`'s integer value in [minimum, maximum], or `fallback` when absent.
bool integerFlag(const std::map<std::string, std::string> &values,
                 const std::string &flag, int64_t fallback, int64_t minimum,
                 int64_t maximum, int64_t &out, std::string &error) {
  auto it = values.find(flag);
  out = fallback;
  if (it == values.end())
    return true;
  if (llvm::StringRef(it->second).getAsInteger(10, out) || out < minimum ||
      out > maximum) {
    error = flag + " needs an integer in [" + std::to_string(minimum) + ", " +
            std::to_string(maximum) + "], got '" + it->second + "'";
    return false;
  }
  return true;
}

} // namespace

bool planNodeRanks(const std::map<std::string, std::string> &values,
                   int64_t worldSize, const std::string &backend,
                   NodeRanks &out, std::string &error) {
  out = NodeRanks();
  out.worldSize = worldSize;
  const bool multiNode = values.count("--nodes") ||
                         values.count("--node-rank") ||
                         values.count("--rendezvous");
  if (multiNode && backend != "cuda") {
    error = "--nodes, --node-rank and --rendezvous start --backend cuda "
            "ranks on several nodes; --backend cpu ranks run under mpirun "
            "(mpirun --hostfile H -np N loom-run PROGRAM ...)";
    return false;
  }
  if (!integerFlag(values, "--nodes", 1, 1, worldSize, out.nodes, error) ||
      !integerFlag(values, "--node-rank", 0, 0, out.nodes - 1, out.nodeRank,
                   error))
    return false;
  if (worldSize % out.nodes != 0) {
    error = "--nodes " + std::to_string(out.nodes) + " does not divide the " +
            std::to_string(worldSize) +
            " ranks of --mesh: every node runs as many ranks (one per GPU)";
    return false;
  }
  out.localRanks = worldSize / out.nodes;
  auto rendezvous = values.find("--rendezvous");
  if (rendezvous == values.end()) {
    if (out.nodes == 1)
      return true; // the launcher's private path
    error = "--nodes " + std::to_string(out.nodes) +
            " needs --rendezvous F: a fresh path on a file system every node "
            "sees, where rank 0 leaves the NCCL id for the others";
    return false;
  }
  out.rendezvous = rendezvous->second;
  if (out.rendezvous.empty()) {
    error = "--rendezvous needs a path";
    return false;
  }
  if (out.nodeRank == 0 && llvm::sys::fs::exists(out.rendezvous)) {
    error = "--rendezvous " + out.rendezvous +
            " already exists (a finished job's NCCL id would send the other "
            "nodes' ranks to it): give each job a fresh path, or remove it";
    return false;
  }
  return true;
}

std::vector<std::string> rankEnvironment(const NodeRanks &node,
                                         int64_t localRank) {
  return {"LOOM_WORLD_SIZE=" + std::to_string(node.worldSize),
          "LOOM_RANK=" +
              std::to_string(node.nodeRank * node.localRanks + localRank),
          "LOOM_LOCAL_WORLD_SIZE=" + std::to_string(node.localRanks),
          "LOOM_LOCAL_RANK=" + std::to_string(localRank),
          "LOOM_NCCL_ID_FILE=" + node.rendezvous};
}

} // namespace loom::cli
