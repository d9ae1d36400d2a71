//===- CrossEntropyFusionTest.cpp - Which losses run with their gradient --===//
//
// planCrossEntropyFusion (runtime/core/cross_entropy_fusion.h) on a
// hand-built bf16 loss (CrossEntropy, the seed's Fill, CrossEntropyGrad)
// and on the compiler's programs: the span fuses in bf16, with or without
// the Fill between, and its gradient may lie exactly over the logits; it
// stays out when the Fill writes what the loss reads or writes, when the
// gradient overlaps the logits in part or the targets, when the loss
// overlaps what the call reads, when the gradient reads other logits or
// targets, in fp32, on a vocabulary-parallel axis, or on the last
// micro-batch only.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/cross_entropy_fusion.h"

#include <gtest/gtest.h>

using namespace loom;
using namespace loom::test;

namespace {

/// Buffer names: logits, targets, loss, seed, dlogits.
struct Loss : PlacedStage {
  static constexpr fb::DType kBF16 = fb::DType::BF16;

  explicit Loss(bool withFill = true) {
    const uint32_t logits = s.buffer("logits", {4, 16}, kBF16),
                   targets = s.buffer("targets", {4}, fb::DType::I32),
                   loss = s.buffer("loss", {}), seed = s.buffer("seed", {}),
                   dlogits = s.buffer("dlogits", {4, 16}, kBF16);
    s.op(fb::Opcode::CrossEntropy, "loss", {logits, targets}, {loss});
    if (withFill)
      s.op(fb::Opcode::Fill, "loss.seed", {}, {seed}).value = 1.0;
    s.op(fb::Opcode::CrossEntropyGrad, "loss.grad", {seed, logits, targets},
         {dlogits});
  }

  /// The plans as (first, count) pairs.
  std::vector<std::pair<uint32_t, uint32_t>> plans() {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (const CrossEntropyFusionPlan &p : planCrossEntropyFusion(packed()))
      out.emplace_back(p.first, p.count);
    return out;
  }
};

using Plans = std::vector<std::pair<uint32_t, uint32_t>>;
const Plans kWithFill = {{0, 3}};

} // namespace

TEST(CrossEntropyFusion, ABf16LossAndItsGradientFuse) {
  Loss withFill;
  EXPECT_EQ(withFill.plans(), kWithFill);
  Loss adjacent(/*withFill=*/false);
  EXPECT_EQ(adjacent.plans(), (Plans{{0, 2}}));
  // The gradient written over the logits, exactly: each block reads its row
  // before it writes it.
  Loss inPlace;
  inPlace.alias("dlogits", "logits");
  EXPECT_EQ(inPlace.plans(), kWithFill);
}

TEST(CrossEntropyFusion, TheFillMayNotWriteWhatTheLossReadsOrWrites) {
  // The Fill now runs before the loss.
  for (const char *victim : {"logits", "targets", "loss"}) {
    Loss l;
    l.alias("seed", victim);
    EXPECT_TRUE(l.plans().empty()) << "the seed over " << victim;
  }
  // Another instruction between them is not moved.
  Loss l;
  l.instruction(1).opcode = fb::Opcode::Gelu;
  EXPECT_TRUE(l.plans().empty());
}

TEST(CrossEntropyFusion, OverlapsTheCallCannotTakeStayOut) {
  {
    Loss l;
    l.alias("dlogits", "logits", 32); // a row later
    EXPECT_TRUE(l.plans().empty());
  }
  {
    Loss l;
    l.alias("dlogits", "targets");
    EXPECT_TRUE(l.plans().empty());
  }
  {
    Loss l;
    l.alias("loss", "logits");
    EXPECT_TRUE(l.plans().empty());
  }
  {
    Loss l;
    l.alias("loss", "dlogits", 8);
    EXPECT_TRUE(l.plans().empty());
  }
}

TEST(CrossEntropyFusion, OtherOperandsFp32AxesAndLastMicrobatchStayOut) {
  {
    // The gradient of other logits.
    Loss l;
    l.instruction(2).inputs[1] = l.s.buffer("other", {4, 16}, fb::DType::BF16);
    EXPECT_TRUE(l.plans().empty());
  }
  {
    Loss l;
    l.buffer("logits").dtype = fb::DType::F32;
    EXPECT_TRUE(l.plans().empty());
  }
  {
    Loss l;
    l.buffer("dlogits").dtype = fb::DType::F32;
    EXPECT_TRUE(l.plans().empty());
  }
  {
    Loss l;
    l.instruction(0).axes = {0};
    EXPECT_TRUE(l.plans().empty());
  }
  {
    Loss l;
    l.instruction(2).last_microbatch_only = true;
    EXPECT_TRUE(l.plans().empty());
  }
}

#if defined(LOOM_PATH) && defined(LOOM_SOURCE_DIR)
TEST(CrossEntropyFusion, TheLossOfTheCompilersBf16ProgramsFuses) {
  struct Case {
    const char *config, *flags;
    bool fuses;
  };
  for (const Case &c : std::vector<Case>{
           {"tiny.json", "--batch 8 --seq 32 --train --precision bf16", true},
           {"tiny.json",
            "--batch 8 --seq 32 --train --precision bf16 --microbatches 2",
            true},
           {"gpt2-124m.json", "--batch 16 --seq 1024 --train --precision bf16",
            true},
           {"tiny.json", "--batch 8 --seq 32 --train", false},
       }) {
    fb::LoadedProgram loaded;
    if (!compileExample(c.config, c.flags, loaded))
      continue;
    SCOPED_TRACE(std::string(c.config) + " " + c.flags);
    const fb::Stage &stage = *loaded.root()->stages()->Get(0);
    const std::vector<CrossEntropyFusionPlan> plans =
        planCrossEntropyFusion(stage);
    if (!c.fuses) {
      EXPECT_TRUE(plans.empty());
      continue;
    }
    // One span: the loss, the seed's Fill, the gradient.
    ASSERT_EQ(plans.size(), 1u);
    const auto *list = stage.instructions();
    EXPECT_EQ(plans[0].count, 3u);
    EXPECT_EQ(list->Get(plans[0].first)->opcode(), fb::Opcode::CrossEntropy);
    EXPECT_EQ(list->Get(plans[0].first + 1)->opcode(), fb::Opcode::Fill);
    EXPECT_EQ(list->Get(plans[0].first + 2)->opcode(),
              fb::Opcode::CrossEntropyGrad);
  }
}
#endif
