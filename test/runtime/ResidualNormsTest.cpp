//===- ResidualNormsTest.cpp - Which Add + LayerNorm pairs run as one call ===//
//
// planResidualNorms (runtime/core/residual_norms.h) on a hand-built bf16
// residual step (Add, LayerNorm; LayerNormGrad, Add) and on the compiler's
// programs: every residual Add beside a layer norm fuses in bf16 and none
// in fp32; a sum or result written over a row tensor the kernel reads
// element by element fuses (the lane that reads an element writes it), a
// partial overlap or one with the weight does not; the LayerNorm's
// statistics, which the fused forward skips, and the LayerNormGrad's input
// gradient, which the fused backward skips, must be read by nothing; an
// Add with a broadcast stays out.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/residual_norms.h"

#include <gtest/gtest.h>

using namespace loom;
using namespace loom::test;

namespace {

/// Buffer names: x, h (the sublayer's output), s (x + h), w, b, y, mean,
/// rstd (forward); dy, dres (the residual stream's gradient), dx, dw, db,
/// gmean, grstd, dsum (backward).
struct Residual : PlacedStage {
  static constexpr fb::DType kBF16 = fb::DType::BF16;

  Residual() {
    const uint32_t x = s.buffer("x", {8, 64}, kBF16),
                   h = s.buffer("h", {8, 64}, kBF16),
                   sum = s.buffer("s", {8, 64}, kBF16),
                   w = s.buffer("w", {64}, kBF16),
                   b = s.buffer("b", {64}, kBF16),
                   y = s.buffer("y", {8, 64}, kBF16),
                   mean = s.buffer("mean", {8}), rstd = s.buffer("rstd", {8}),
                   dy = s.buffer("dy", {8, 64}, kBF16),
                   dres = s.buffer("dres", {8, 64}, kBF16),
                   dx = s.buffer("dx", {8, 64}, kBF16),
                   dw = s.buffer("dw", {64}, kBF16),
                   db = s.buffer("db", {64}, kBF16),
                   gmean = s.buffer("gmean", {8}),
                   grstd = s.buffer("grstd", {8}),
                   dsum = s.buffer("dsum", {8, 64}, kBF16);
    s.op(fb::Opcode::Add, "residual", {x, h}, {sum});
    s.op(fb::Opcode::LayerNorm, "ln", {sum, w, b}, {y}, {mean, rstd}).epsilon =
        1e-5;
    s.op(fb::Opcode::LayerNormGrad, "ln.grad", {dy, sum, w}, {dx, dw, db},
         {gmean, grstd})
        .epsilon = 1e-5;
    s.op(fb::Opcode::Add, "residual.grad", {dres, dx}, {dsum});
  }

  /// The plans as (first, backward) pairs.
  std::vector<std::pair<uint32_t, bool>> plans() {
    std::vector<std::pair<uint32_t, bool>> out;
    for (const ResidualNormPlan &p : planResidualNorms(packed()))
      out.emplace_back(p.first, p.backward);
    return out;
  }
};

using Plans = std::vector<std::pair<uint32_t, bool>>;
const Plans kBoth = {{0, false}, {2, true}};
const Plans kForwardOnly = {{0, false}};
const Plans kBackwardOnly = {{2, true}};

} // namespace

TEST(ResidualNorms, BothPairsOfABf16ResidualStepFuse) {
  Residual r;
  EXPECT_EQ(r.plans(), kBoth);
  // The Add's operands in the other order.
  auto &add = *r.program->stages[0]->instructions[3];
  std::swap(add.inputs[0], add.inputs[1]);
  EXPECT_EQ(r.plans(), kBoth);
}

TEST(ResidualNorms, ResultsOverTheRowsTheKernelReadsFuse) {
  // The lane that reads an element writes it: a result may be a row
  // tensor the kernel reads, exactly.
  for (const char *row : {"x", "h"}) {
    Residual r;
    r.alias("s", row);
    EXPECT_EQ(r.plans(), kBoth) << "s at " << row;
  }
  for (const char *row : {"dy", "dres"}) {
    Residual r;
    r.alias("dsum", row);
    EXPECT_EQ(r.plans(), kBoth) << "dsum at " << row;
  }
  // The backward's statistics are written by their own kernel first, so
  // the sum written after them may take their bytes.
  Residual r;
  r.alias("dsum", "gmean");
  EXPECT_EQ(r.plans(), kBoth);
}

TEST(ResidualNorms, PartialOverlapsAndTheWeightStayOut) {
  {
    Residual r;
    r.alias("y", "x", 64); // half a row later
    EXPECT_EQ(r.plans(), kBackwardOnly);
  }
  {
    Residual r;
    r.alias("s", "w"); // the backward only reads both
    EXPECT_EQ(r.plans(), kBackwardOnly);
  }
  {
    Residual r;
    r.alias("dsum", "dy", 128);
    EXPECT_EQ(r.plans(), kForwardOnly);
  }
  {
    Residual r;
    r.alias("dw", "dres");
    EXPECT_EQ(r.plans(), kForwardOnly);
  }
  {
    Residual r;
    r.alias("gmean", "dy");
    EXPECT_EQ(r.plans(), kForwardOnly);
  }
}

TEST(ResidualNorms, WhatTheFusedCallSkipsMustBeReadByNothing) {
  {
    // The forward's statistics read later: the fused forward would leave
    // them unwritten.
    Residual r;
    r.s.op(fb::Opcode::Gelu, "reads mean", {r["mean"]},
           {r.s.buffer("out", {8})});
    EXPECT_EQ(r.plans(), kBackwardOnly);
  }
  {
    // The input gradient read after the Add.
    Residual r;
    r.s.op(fb::Opcode::Gelu, "reads dx", {r.aliasOf("dx")},
           {r.s.buffer("out", {8, 64}, fb::DType::BF16)});
    EXPECT_EQ(r.plans(), kForwardOnly);
  }
  {
    // Overwritten before that read: fine.
    Residual r;
    const uint32_t reuse = r.aliasOf("dx");
    r.s.op(fb::Opcode::Gelu, "writes dx's bytes", {r["dsum"]}, {reuse});
    r.s.op(fb::Opcode::Gelu, "reads them", {reuse},
           {r.s.buffer("out", {8, 64}, fb::DType::BF16)});
    EXPECT_EQ(r.plans(), kBoth);
  }
}

TEST(ResidualNorms, BroadcastsFp32AndLastMicrobatchStayOut) {
  {
    Residual r;
    r.buffer("h").shape = {64}; // the Add broadcasts h over the rows
    EXPECT_EQ(r.plans(), kBackwardOnly);
  }
  {
    Residual r;
    r.buffer("dres").dtype = fb::DType::F32;
    EXPECT_EQ(r.plans(), kForwardOnly);
  }
  {
    Residual r;
    r.program->stages[0]->instructions[1]->last_microbatch_only = true;
    r.program->stages[0]->instructions[3]->last_microbatch_only = true;
    EXPECT_TRUE(r.plans().empty());
  }
}

#if defined(LOOM_PATH) && defined(LOOM_SOURCE_DIR)
TEST(ResidualNorms, EveryResidualLayerNormOfTheCompilersBf16ProgramsFuses) {
  // Per layer two residual Adds, each followed by the next layer norm
  // (the last by ln_f); backward each of a layer's two LayerNormGrads is
  // followed by its residual Add. The first LayerNorm (after the
  // embeddings' broadcast Add of wpe) and ln_f's gradient (the first of
  // the backward, with no Add after it) stay out.
  expectCompiledPairs(
      {
          {"tiny.json", "--batch 8 --seq 32 --train --precision bf16", 4, 4},
          {"gpt2-124m.json", "--batch 16 --seq 1024 --train --precision bf16",
           24, 24},
          {"tiny.json", "--batch 8 --seq 32 --train", 0, 0},
      },
      planResidualNorms, fb::Opcode::Add, fb::Opcode::LayerNormGrad);
}
#endif
