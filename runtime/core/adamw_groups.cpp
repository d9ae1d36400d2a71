//===- adamw_groups.cpp - Which update instructions run as one group ------===//
#include "runtime/core/adamw_groups.h"

#include <algorithm>

namespace loom {
namespace {

using program::BufferRange;
using program::DType;
using program::Instruction;
using program::Opcode;
using program::Stage;

DType dtypeOf(const Stage &stage, uint32_t buffer) {
  return stage.buffers()->Get(buffer)->dtype();
}

bool sameBytes(const Stage &stage, uint32_t a, uint32_t b) {
  return program::bufferRange(stage, a) == program::bufferRange(stage, b);
}

/// The member `ins` makes when it is an AdamW that can join a group: fp32
/// parameters and moments updated in place, fp32 or bf16 gradients.
bool groupableAdamW(const Stage &stage, const Instruction &ins,
                    AdamWGroupPlan::Member &member) {
  if (ins.opcode() != Opcode::AdamW || ins.last_microbatch_only())
    return false;
  const auto *in = ins.inputs();
  const auto *out = ins.outputs();
  if (!in || !out || in->size() != 7 || out->size() != 3)
    return false;
  const uint32_t state[3] = {in->Get(0), in->Get(2), in->Get(3)};
  for (uint32_t j = 0; j < 3; ++j)
    if (dtypeOf(stage, state[j]) != DType::F32 ||
        !sameBytes(stage, out->Get(j), state[j]))
      return false;
  const DType grads = dtypeOf(stage, in->Get(1));
  if (grads != DType::F32 && grads != DType::BF16)
    return false;
  for (uint32_t j = 4; j < 7; ++j)
    if (dtypeOf(stage, in->Get(j)) != DType::F32)
      return false;
  member.params = state[0];
  member.grads = in->Get(1);
  member.m = state[1];
  member.v = state[2];
  member.bf16Params = -1;
  member.weightDecay = ins.weight_decay();
  return true;
}

/// Whether AdamW `ins` reads the group's scalars with its hyper-parameters
/// (weight decay aside).
bool sharesScalars(const AdamWGroupPlan &group, const Instruction &ins) {
  const auto *in = ins.inputs();
  return in->Get(4) == group.lr && in->Get(5) == group.step &&
         in->Get(6) == group.gradScale && ins.beta1() == group.hyper.beta1 &&
         ins.beta2() == group.hyper.beta2 && ins.adam_eps() == group.hyper.eps;
}

/// The output of `ins` when it is the Cast of fp32 `params` to bf16; -1
/// otherwise.
int32_t bf16CopyOf(const Stage &stage, const Instruction &ins,
                   uint32_t params) {
  if (ins.opcode() != Opcode::Cast || ins.last_microbatch_only() ||
      !ins.inputs() || !ins.outputs() || ins.inputs()->size() != 1 ||
      ins.outputs()->size() != 1)
    return -1;
  const uint32_t out = ins.outputs()->Get(0);
  if (!sameBytes(stage, ins.inputs()->Get(0), params) ||
      dtypeOf(stage, out) != DType::BF16 ||
      program::bufferShape(stage, out) != program::bufferShape(stage, params))
    return -1;
  return static_cast<int32_t>(out);
}

/// Whether no member writes bytes that another member, or the shared
/// scalars, use: then the members commute.
bool membersDisjoint(const Stage &stage, const AdamWGroupPlan &group) {
  std::vector<BufferRange> writes, reads;
  auto add = [&](std::vector<BufferRange> &to, uint32_t buffer) {
    const BufferRange r = program::bufferRange(stage, buffer);
    if (r.bytes() > 0)
      to.push_back(r);
  };
  for (const AdamWGroupPlan::Member &m : group.members) {
    for (uint32_t b : {m.params, m.m, m.v})
      add(writes, b);
    if (m.bf16Params >= 0)
      add(writes, static_cast<uint32_t>(m.bf16Params));
    add(reads, m.grads);
  }
  for (uint32_t b : {group.lr, group.step, group.gradScale})
    add(reads, b);
  auto byBegin = [](const BufferRange &a, const BufferRange &b) {
    return a.begin < b.begin;
  };
  std::sort(writes.begin(), writes.end(), byBegin);
  // Sorted by their start, non-empty ranges overlap somewhere only if two
  // neighbours do.
  for (size_t k = 1; k < writes.size(); ++k)
    if (writes[k].begin < writes[k - 1].end)
      return false;
  // The writes are now disjoint and sorted by start and by end alike: the
  // first one ending after a read starts is the only candidate overlap.
  for (const BufferRange &r : reads) {
    auto w = std::upper_bound(
        writes.begin(), writes.end(), r.begin,
        [](uint64_t begin, const BufferRange &x) { return begin < x.end; });
    if (w != writes.end() && w->begin < r.end)
      return false;
  }
  return true;
}

} // namespace

std::vector<AdamWGroupPlan> planAdamWGroups(
    const Stage &stage,
    const flatbuffers::Vector<flatbuffers::Offset<Instruction>> &list) {
  std::vector<AdamWGroupPlan> groups;
  const uint32_t n = list.size();
  for (uint32_t i = 0; i < n;) {
    AdamWGroupPlan group;
    AdamWGroupPlan::Member member;
    const Instruction &head = *list.Get(i);
    if (!groupableAdamW(stage, head, member)) {
      ++i;
      continue;
    }
    group.first = i;
    group.lr = head.inputs()->Get(4);
    group.step = head.inputs()->Get(5);
    group.gradScale = head.inputs()->Get(6);
    group.hyper.beta1 = head.beta1();
    group.hyper.beta2 = head.beta2();
    group.hyper.eps = head.adam_eps();
    uint32_t j = i;
    while (j < n && groupableAdamW(stage, *list.Get(j), member) &&
           sharesScalars(group, *list.Get(j))) {
      ++j;
      if (j < n) {
        member.bf16Params = bf16CopyOf(stage, *list.Get(j), member.params);
        if (member.bf16Params >= 0)
          ++j;
      }
      group.members.push_back(member);
    }
    group.count = j - i;
    if (group.count >= 2 && membersDisjoint(stage, group))
      groups.push_back(std::move(group));
    i = j;
  }
  return groups;
}

} // namespace loom
