//===- AdamWGroupsTest.cpp - Which update instructions run grouped --------===//
//
// planAdamWGroups (runtime/core/adamw_groups.h) on hand-built update lists:
// the compiler's in-place AdamW run groups whole, a mixed-precision Cast of
// each new master joins it, and whatever could change a result when the
// instructions run as one pass (a ZeRO update into a fresh shard, other
// scalars or betas, a last-micro-batch-only instruction, members that share
// bytes) stays out or splits the run.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/adamw_groups.h"

#include <gtest/gtest.h>

using namespace loom;
using namespace loom::test;

namespace {

/// A training stage with `params` parameters and the compiler's optimizer
/// (SumSquares, ClipCoef, one AdamW per parameter).
std::unique_ptr<fb::ProgramT> optimizerProgram(int params) {
  auto p = emptyProgram(2, 8, 50);
  StageBuilder s(*p->stages[0]);
  for (int i = 0; i < params; ++i)
    s.param("p" + std::to_string(i),
            i % 2 ? std::vector<int64_t>{16} : std::vector<int64_t>{16, 8});
  addTrainingBuffers(s);
  addOptimizer(s, 1.0);
  return p;
}

/// The groups of stage 0's update list, through a packed program (the
/// planner reads the FlatBuffers tables the executor has).
std::vector<AdamWGroupPlan> groupsOf(const fb::ProgramT &program) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(fb::Program::Pack(fbb, &program));
  const fb::Program *packed = fb::GetProgram(fbb.GetBufferPointer());
  const fb::Stage &stage = *packed->stages()->Get(0);
  return planAdamWGroups(stage, *stage.update_instructions());
}

fb::InstructionT &update(fb::ProgramT &p, size_t i) {
  return *p.stages[0]->update_instructions[i];
}

} // namespace

TEST(AdamWGroups, TheCompilersUpdateIsOneGroup) {
  auto p = optimizerProgram(5);
  const auto groups = groupsOf(*p);
  ASSERT_EQ(groups.size(), 1u);
  const AdamWGroupPlan &g = groups[0];
  EXPECT_EQ(g.first, 2u); // after SumSquares and ClipCoef
  EXPECT_EQ(g.count, 5u);
  ASSERT_EQ(g.members.size(), 5u);
  const fb::StageT &stage = *p->stages[0];
  for (size_t i = 0; i < 5; ++i) {
    const fb::ParamT &param = *stage.params[i];
    const AdamWGroupPlan::Member &m = g.members[i];
    EXPECT_EQ(m.params, param.buffer);
    EXPECT_EQ(m.grads, static_cast<uint32_t>(param.grad_buffer));
    EXPECT_EQ(m.m, static_cast<uint32_t>(param.m_buffer));
    EXPECT_EQ(m.v, static_cast<uint32_t>(param.v_buffer));
    EXPECT_EQ(m.bf16Params, -1);
    EXPECT_EQ(m.weightDecay, param.decay ? 0.1 : 0.0);
  }
  EXPECT_EQ(g.lr, static_cast<uint32_t>(stage.lr));
  EXPECT_EQ(g.step, static_cast<uint32_t>(stage.step));
  EXPECT_EQ(g.hyper.beta2, 0.95);
}

TEST(AdamWGroups, MixedPrecisionCastsJoinTheirUpdate) {
  // Mixed precision's form: AdamW on the fp32 master (bf16 gradient), then
  // Cast of the new master into the bf16 compute weights.
  auto p = emptyProgram(2, 8, 50);
  StageBuilder s(*p->stages[0]);
  const uint32_t lr = s.buffer("lr", {}), step = s.buffer("step", {}),
                 coef = s.buffer("coef", {});
  std::vector<uint32_t> masters, copies;
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    const uint32_t master = s.buffer("master" + n, {4, 8}),
                   bf16 = s.buffer("w" + n, {4, 8}, fb::DType::BF16),
                   grad = s.buffer("g" + n, {4, 8}, fb::DType::BF16),
                   m = s.buffer("m" + n, {4, 8}), v = s.buffer("v" + n, {4, 8});
    s.updateOp(fb::Opcode::AdamW, "adamw" + n,
               {master, grad, m, v, lr, step, coef}, {master, m, v});
    s.updateOp(fb::Opcode::Cast, "cast" + n, {master}, {bf16});
    masters.push_back(master);
    copies.push_back(bf16);
  }
  // A Cast to fp32, and one of another buffer, are not the member's copy.
  const uint32_t wide = s.buffer("wide", {4, 8});
  update(*p, 3).inputs = {copies[1]};
  update(*p, 3).outputs = {wide};
  auto groups = groupsOf(*p);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].first, 0u);
  EXPECT_EQ(groups[0].count, 3u); // adamw0, cast0, adamw1
  ASSERT_EQ(groups[0].members.size(), 2u);
  EXPECT_EQ(groups[0].members[0].bf16Params, static_cast<int32_t>(copies[0]));
  EXPECT_EQ(groups[0].members[1].bf16Params, -1);
  EXPECT_EQ(groups[1].first, 4u); // adamw2, cast2
  EXPECT_EQ(groups[1].count, 2u);
  EXPECT_EQ(groups[1].members[0].params, masters[2]);
  EXPECT_EQ(groups[1].members[0].bf16Params, static_cast<int32_t>(copies[2]));
}

TEST(AdamWGroups, WhatCouldChangeAResultSplitsTheRun) {
  // AdamW #2 of 6 (update index 4) writes a fresh parameter shard (ZeRO):
  // it runs alone, the others in a group before and after it.
  {
    auto p = optimizerProgram(6);
    StageBuilder s(*p->stages[0]);
    update(*p, 4).outputs[0] = s.buffer("fresh_shard", {16, 8});
    const auto groups = groupsOf(*p);
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(groups[0].first, 2u);
    EXPECT_EQ(groups[0].count, 2u);
    EXPECT_EQ(groups[1].first, 5u);
    EXPECT_EQ(groups[1].count, 3u);
  }
  // Another clip coefficient, beta1, eps or beta2 from AdamW #3 of 4 on
  // start a new group.
  for (int field = 0; field < 4; ++field) {
    auto p = optimizerProgram(4);
    StageBuilder s(*p->stages[0]);
    const uint32_t otherCoef = s.buffer("other_coef", {});
    for (size_t i : {4, 5}) {
      fb::InstructionT &ins = update(*p, i);
      if (field == 0)
        ins.inputs[6] = otherCoef;
      else if (field == 1)
        ins.beta1 = 0.8;
      else if (field == 2)
        ins.adam_eps = 1e-6;
      else
        ins.beta2 = 0.999;
    }
    const auto groups = groupsOf(*p);
    ASSERT_EQ(groups.size(), 2u) << "field " << field;
    EXPECT_EQ(groups[0].count, 2u);
    EXPECT_EQ(groups[1].first, 4u);
    EXPECT_EQ(groups[1].count, 2u);
  }
  // A last-micro-batch-only AdamW runs alone; a lone AdamW is no group.
  {
    auto p = optimizerProgram(3);
    update(*p, 3).last_microbatch_only = true;
    EXPECT_TRUE(groupsOf(*p).empty());
  }
  // Members that share bytes: one's gradient is another's moment, or
  // starts inside it, or two write the same bytes, or one writes the
  // learning rate: none grouped.
  for (int clash = 0; clash < 4; ++clash) {
    auto p = optimizerProgram(4);
    StageBuilder s(*p->stages[0]);
    const uint32_t inside = s.buffer("inside", {4});
    fb::InstructionT &a = update(*p, 2), &b = update(*p, 4);
    if (clash == 0) {
      b.inputs[1] = a.inputs[2];
    } else if (clash == 1) {
      p->stages[0]->buffers[inside]->offset =
          p->stages[0]->buffers[a.inputs[2]]->offset + 64;
      b.inputs[1] = inside;
    } else if (clash == 2) {
      b.outputs[2] = b.inputs[3] = a.inputs[3];
    } else {
      b.outputs[1] = b.inputs[2] = a.inputs[4];
    }
    EXPECT_TRUE(groupsOf(*p).empty()) << "clash " << clash;
  }
}

#if defined(LOOM_PATH) && defined(LOOM_SOURCE_DIR)
TEST(AdamWGroups, CompiledUpdatesGroupWhole) {
  // What `loom compile --train` emits: after SumSquares and ClipCoef, every
  // AdamW (and in bf16 the Cast of its master) in one group; GPT-2 124M's
  // 296 update instructions run as one call. An fp32 ZeRO-1 update writes
  // fresh parameter shards (then all-gathered): nothing to group there. In
  // bf16 every ZeRO stage updates its fp32 master shards in place: one group
  // again, after the squares' all-reduce and ClipCoef (and at ZeRO-1 after
  // taking its blocks of the gradients reduce-scattered in place, one
  // LocalSlice each); ZeRO-1/2 then all-gather the new bf16 shards, one
  // AllGather after the group.
  struct Case {
    const char *config, *flags;
    size_t params;
    bool casts;
    uint32_t first = 2; // after SumSquares, ClipCoef
    uint32_t after = 0; // instructions after the group
  };
  const Case cases[] = {
      {"tiny.json", "--batch 4 --seq 32 --train", 28, false},
      {"tiny.json", "--batch 4 --seq 32 --train --precision bf16", 28, true},
      {"gpt2-124m.json", "--batch 4 --seq 1024 --train --precision bf16", 148,
       true},
      {"tiny.json", "--batch 8 --seq 32 --train --mesh dp=2 --zero 1", 0,
       false},
      {"tiny.json",
       "--batch 8 --seq 32 --train --mesh dp=2 --zero 1 --precision bf16", 28,
       true, 28 + 3, 1},
      {"tiny.json",
       "--batch 8 --seq 32 --train --mesh dp=2 --zero 2 --precision bf16", 28,
       true, 3, 1},
      {"tiny.json",
       "--batch 8 --seq 32 --train --mesh dp=2 --zero 3 --precision bf16", 28,
       true, 3},
  };
  for (const Case &c : cases) {
    fb::LoadedProgram loaded;
    if (!compileExample(c.config, c.flags, loaded))
      continue;
    const fb::Stage &stage = *loaded.root()->stages()->Get(0);
    const auto groups = planAdamWGroups(stage, *stage.update_instructions());
    SCOPED_TRACE(std::string(c.config) + " " + c.flags);
    if (c.params == 0) {
      EXPECT_TRUE(groups.empty());
      continue;
    }
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].first, c.first);
    EXPECT_EQ(groups[0].count, c.params * (c.casts ? 2 : 1));
    EXPECT_EQ(groups[0].first + groups[0].count + c.after,
              stage.update_instructions()->size());
    ASSERT_EQ(groups[0].members.size(), c.params);
    for (const AdamWGroupPlan::Member &m : groups[0].members)
      EXPECT_EQ(m.bf16Params >= 0, c.casts);
  }
}
#endif
