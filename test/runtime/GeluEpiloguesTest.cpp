//===- GeluEpiloguesTest.cpp - Which GEMM + GELU pairs run as one call ----===//
//
// planGeluEpilogues (runtime/core/gelu_epilogues.h) on a hand-built bf16
// MLP (Linear, Gelu, Linear; LinearGrad, GeluGrad, LinearGrad) and on the
// compiler's programs: both pairs of every MLP fuse in bf16 and none in
// fp32, and whatever the fused call would change stays out: a later read of
// the input gradient it never writes (in this micro-batch, the next one, or
// the update; bytes written again first, by an output or a scratch buffer,
// are no longer its), a result overlapping what the GEMM reads, an fp32
// operand, a last-micro-batch-only instruction, a parameter's gradient
// buffer.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/gelu_epilogues.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace loom;
using namespace loom::test;

namespace {

/// A bf16 MLP's forward and backward, the compiler's form. Buffer names:
/// x, w1, b1, pre, act, w2, b2, y (forward); dy, dact, dw2, db2, dpre, dx,
/// dw1, db1 (backward).
struct Mlp : PlacedStage {
  static constexpr fb::DType kBF16 = fb::DType::BF16;

  Mlp() {
    const uint32_t x = s.buffer("x", {8, 16}, kBF16),
                   w1 = s.buffer("w1", {16, 64}, kBF16),
                   b1 = s.buffer("b1", {64}, kBF16),
                   pre = s.buffer("pre", {8, 64}, kBF16),
                   act = s.buffer("act", {8, 64}, kBF16),
                   w2 = s.buffer("w2", {64, 16}, kBF16),
                   b2 = s.buffer("b2", {16}, kBF16),
                   y = s.buffer("y", {8, 16}, kBF16),
                   dy = s.buffer("dy", {8, 16}, kBF16),
                   dact = s.buffer("dact", {8, 64}, kBF16),
                   dw2 = s.buffer("dw2", {64, 16}, kBF16),
                   db2 = s.buffer("db2", {16}, kBF16),
                   dpre = s.buffer("dpre", {8, 64}, kBF16),
                   dx = s.buffer("dx", {8, 16}, kBF16),
                   dw1 = s.buffer("dw1", {16, 64}, kBF16),
                   db1 = s.buffer("db1", {64}, kBF16);
    s.op(fb::Opcode::Linear, "fc", {x, w1, b1}, {pre});
    s.op(fb::Opcode::Gelu, "gelu", {pre}, {act});
    s.op(fb::Opcode::Linear, "proj", {act, w2, b2}, {y});
    s.op(fb::Opcode::LinearGrad, "proj.grad", {dy, act, w2}, {dact, dw2, db2});
    s.op(fb::Opcode::GeluGrad, "gelu.grad", {dact, pre}, {dpre});
    s.op(fb::Opcode::LinearGrad, "fc.grad", {dpre, x, w1}, {dx, dw1, db1});
  }

  /// The plans as (first, backward) pairs.
  std::vector<std::pair<uint32_t, bool>> plans() {
    std::vector<std::pair<uint32_t, bool>> out;
    for (const GeluEpiloguePlan &p : planGeluEpilogues(packed()))
      out.emplace_back(p.first, p.backward);
    return out;
  }
};

using Plans = std::vector<std::pair<uint32_t, bool>>;
const Plans kBoth = {{0, false}, {3, true}};
const Plans kForwardOnly = {{0, false}};
const Plans kBackwardOnly = {{3, true}};

} // namespace

TEST(GeluEpilogues, BothPairsOfABf16MlpFuse) {
  Mlp m;
  EXPECT_EQ(m.plans(), kBoth);
}

TEST(GeluEpilogues, APreActivationReadByNothingElseIsNotKept) {
  // Training: the GeluGrad reads the pre-activation, which the fused GEMM
  // must write. An evaluation (the forward alone): nothing does.
  Mlp train;
  std::vector<GeluEpiloguePlan> plans = planGeluEpilogues(train.packed());
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_FALSE(plans[0].firstResultUnread);
  Mlp eval;
  eval.program->stages[0]->instructions.resize(3);
  plans = planGeluEpilogues(eval.packed());
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_FALSE(plans[0].backward);
  EXPECT_TRUE(plans[0].firstResultUnread);
  // Read again later (here by a copy into another buffer): kept.
  Mlp read;
  read.program->stages[0]->instructions.resize(3);
  read.s.op(fb::Opcode::Gelu, "again", {read["pre"]}, {read["dpre"]});
  plans = planGeluEpilogues(read.packed());
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_FALSE(plans[0].firstResultUnread);
}

TEST(GeluEpilogues, TheGeluGradsResultMayTakeTheActivationsPlace) {
  // The buffer planner's choice: the saved activation is dead once the
  // weight gradient has read it, and dpre goes there. The fused call runs
  // the weight gradients first, so this still fuses.
  Mlp m;
  m.alias("dpre", "act");
  EXPECT_EQ(m.plans(), kBoth);
}

TEST(GeluEpilogues, AResultOverlappingWhatTheGemmReadsStaysOut) {
  for (const char *read : {"dy", "w2", "pre"}) {
    Mlp m;
    m.alias("dpre", read);
    EXPECT_EQ(m.plans(), kForwardOnly) << "dpre at " << read;
  }
  for (const char *read : {"x", "w1", "b1", "pre"}) {
    Mlp m;
    m.alias("act", read);
    EXPECT_EQ(m.plans(), kBackwardOnly) << "act at " << read;
  }
  for (const char *read : {"x", "w1", "b1"}) {
    Mlp m;
    m.alias("pre", read);
    EXPECT_EQ(m.plans(), kBackwardOnly) << "pre at " << read;
  }
  for (const char *read : {"dy", "act", "w2", "pre"}) {
    Mlp m;
    m.alias("dw2", read);
    EXPECT_EQ(m.plans(), kForwardOnly) << "dw2 at " << read;
  }
}

TEST(GeluEpilogues, AnInputGradientReadLaterStaysOut) {
  {
    // Read after the pair, in this micro-batch.
    Mlp m;
    m.s.op(fb::Opcode::Add, "reads dact", {m["dact"], m["dact"]},
           {m.s.buffer("sum", {8, 64}, fb::DType::BF16)});
    EXPECT_EQ(m.plans(), kForwardOnly);
  }
  {
    // Through another buffer on its bytes.
    Mlp m;
    m.s.op(fb::Opcode::Gelu, "reads dact's bytes", {m.aliasOf("dact")},
           {m.s.buffer("out", {8, 64}, fb::DType::BF16)});
    EXPECT_EQ(m.plans(), kForwardOnly);
  }
  {
    // At the start of the next micro-batch's pass (before the LinearGrad
    // writes it again).
    Mlp m;
    const uint32_t early = m.aliasOf("dact");
    auto &list = m.program->stages[0]->instructions;
    m.s.op(fb::Opcode::Gelu, "reads dact's bytes first", {early},
           {m.s.buffer("out", {8, 64}, fb::DType::BF16)});
    std::rotate(list.begin(), list.end() - 1, list.end());
    EXPECT_EQ(m.plans(), (Plans{{1, false}}));
  }
  {
    // In the update.
    Mlp m;
    m.s.updateOp(fb::Opcode::Gelu, "update reads dact", {m["dact"]},
                 {m.s.buffer("out", {8, 64}, fb::DType::BF16)});
    EXPECT_EQ(m.plans(), kForwardOnly);
  }
}

TEST(GeluEpilogues, AnInputGradientOverwrittenBeforeItsNextReadFuses) {
  // Its bytes are written whole by a later instruction before anything
  // reads them: the value it never holds is read by nothing.
  Mlp m;
  const uint32_t reuse = m.aliasOf("dact");
  m.s.op(fb::Opcode::Gelu, "writes dact's bytes", {m["dpre"]}, {reuse});
  m.s.op(fb::Opcode::Gelu, "then reads them", {reuse},
         {m.s.buffer("out", {8, 64}, fb::DType::BF16)});
  EXPECT_EQ(m.plans(), kBoth);
  // A scratch buffer is written by its instruction before it is read.
  Mlp scratch;
  scratch.s.op(fb::Opcode::LayerNorm, "scratch on dact's bytes",
               {scratch["dpre"], scratch["b1"], scratch["b1"]},
               {scratch.s.buffer("ln", {8, 64}, fb::DType::BF16)},
               {scratch.aliasOf("dact")});
  scratch.s.op(fb::Opcode::Gelu, "then reads them", {scratch.aliasOf("dact")},
               {scratch.s.buffer("out", {8, 64}, fb::DType::BF16)});
  EXPECT_EQ(scratch.plans(), kBoth);
  // Written in part: the rest is still read.
  Mlp half;
  const uint32_t part = half.s.buffer("part", {4, 64}, fb::DType::BF16);
  half.program->stages[0]->buffers[part]->offset = half.buffer("dact").offset;
  half.s.op(fb::Opcode::Gelu, "writes half",
            {half.s.buffer("src", {4, 64}, fb::DType::BF16)}, {part});
  half.s.op(fb::Opcode::Gelu, "reads all", {half.aliasOf("dact")},
            {half.s.buffer("out", {8, 64}, fb::DType::BF16)});
  EXPECT_EQ(half.plans(), kForwardOnly);
}

TEST(GeluEpilogues, AnInputGradientTheRuntimeReadsStaysOut) {
  {
    Mlp m;
    m.program->stages[0]->loss = static_cast<int32_t>(m.aliasOf("dact"));
    EXPECT_EQ(m.plans(), kForwardOnly);
  }
  {
    Mlp m;
    m.program->stages[0]->grad_norm = static_cast<int32_t>(m.aliasOf("dact"));
    EXPECT_EQ(m.plans(), kForwardOnly);
    // Unless the update writes it first (as ClipCoef writes the norm).
    m.s.updateOp(fb::Opcode::Gelu, "update writes dact's bytes", {m["dpre"]},
                 {m.aliasOf("dact")});
    EXPECT_EQ(m.plans(), kBoth);
  }
  Mlp m;
  auto param = std::make_unique<fb::ParamT>();
  param->name = "w2";
  param->global_shape = {64, 16};
  param->slice_offset = {0, 0};
  param->buffer = m["w2"];
  param->grad_buffer = static_cast<int32_t>(m.aliasOf("dact"));
  m.program->stages[0]->params.push_back(std::move(param));
  EXPECT_EQ(m.plans(), kForwardOnly);
}

TEST(GeluEpilogues, Fp32OperandsAndLastMicrobatchInstructionsStayOut) {
  {
    Mlp m;
    m.buffer("w1").dtype = fb::DType::F32;
    EXPECT_EQ(m.plans(), kBackwardOnly);
  }
  {
    Mlp m;
    m.buffer("pre").dtype = fb::DType::F32;
    EXPECT_TRUE(m.plans().empty());
  }
  {
    // Not read by the fused GEMM: x and the weight gradients may be fp32.
    Mlp m;
    m.buffer("dw2").dtype = fb::DType::F32;
    m.buffer("act").dtype = fb::DType::F32;
    EXPECT_EQ(m.plans(), kBackwardOnly);
  }
  {
    Mlp m;
    m.instruction(1).last_microbatch_only = true;
    m.instruction(4).last_microbatch_only = true;
    EXPECT_TRUE(m.plans().empty());
  }
}

#if defined(LOOM_PATH) && defined(LOOM_SOURCE_DIR)
TEST(GeluEpilogues, EveryMlpOfTheCompilersBf16ProgramsFuses) {
  expectCompiledPairs(
      {
          {"tiny.json", "--batch 8 --seq 32 --train --precision bf16", 2, 2},
          // gpu-check's step d program.
          {"gpt2-124m.json", "--batch 16 --seq 1024 --train --precision bf16",
           12, 12},
          // ZeRO-3: the buffer planner keeps the gathered c_fc weight (read
          // last by the Linear) through the Gelu, so the Gelu's result,
          // which the fused GEMM writes while reading the weight, is not
          // put there.
          {"tiny.json",
           "--batch 8 --seq 32 --train --precision bf16 --mesh dp=2 --zero 3",
           2, 2},
          // Evaluation: the same for the Linear's input activation.
          {"tiny.json", "--batch 8 --seq 32 --precision bf16", 2, 0},
          {"tiny.json", "--batch 8 --seq 32 --train", 0, 0},
      },
      planGeluEpilogues, fb::Opcode::Linear, fb::Opcode::LinearGrad);
}
#endif
