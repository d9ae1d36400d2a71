//===- adamw_groups.h - Update instructions run as one group ----*- C++ -*-===//
//
// A backend that groups AdamW updates (KernelBackend::groupsAdamW, the CUDA
// backend) gets each run of an update list's AdamW instructions in one
// adamwGroup call instead of one launch per instruction, with the Cast that
// writes each new master's bf16 compute copy folded in. Which runs qualify
// is decided once, when the executor loads the stage: the plan names
// buffers, and the executor turns them into pointers at each step.
//
// A run qualifies when grouping cannot change a bit of any result: every
// AdamW updates fp32 parameters and moments in place (bf16 programs' master
// shards at every ZeRO stage do; an fp32 ZeRO update that writes a fresh
// shard of the parameter does not), all read the same lr / step / clip
// coefficient and share beta1, beta2 and eps, none runs only on the last
// micro-batch, and no member's written bytes touch another member's (or
// the scalars'). The instructions then commute, so one pass over all of
// them gives what they give in order.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_ADAMW_GROUPS_H
#define LOOM_RUNTIME_CORE_ADAMW_GROUPS_H

#include "runtime/core/kernel_backend.h"
#include "runtime/program/program.h"

#include <cstdint>
#include <vector>

namespace loom {

/// Instructions [first, first + count) of an update list, run as one
/// KernelBackend::adamwGroup call.
struct AdamWGroupPlan {
  uint32_t first = 0, count = 0;
  /// One per AdamW instruction, in list order (buffer indices).
  struct Member {
    uint32_t params = 0, grads = 0, m = 0, v = 0;
    /// The BF16 output of the Cast of the updated params that follows the
    /// AdamW (-1: none).
    int32_t bf16Params = -1;
    double weightDecay = 0;
  };
  std::vector<Member> members;
  uint32_t lr = 0, step = 0, gradScale = 0;
  /// Shared by the members; weightDecay is each member's.
  AdamWHyperParams hyper;
};

/// The groups of `list` (an update list of `stage`, which must be verified):
/// maximal runs, of two instructions or more, that qualify as the file
/// comment says, in list order.
std::vector<AdamWGroupPlan> planAdamWGroups(
    const program::Stage &stage,
    const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>> &list);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_ADAMW_GROUPS_H
