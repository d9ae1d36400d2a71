//===- InstructionCostTest.cpp - FLOPs and bytes of a kernel call ---------===//
//
// runtime/core/instruction_cost.h on compiled programs. A training step's
// FLOPs, summed over every instruction each rank runs (stageStepCost's
// micro-batches and pipeline chunks, then the ranks), are the model's
// whatever the strategy: the
// shapes are each rank's, so a count that read a global shape or missed a
// shard would be off by the mesh's size. A fused span's bytes are its
// instructions' less what it reads of its own results.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/gelu_epilogues.h"
#include "runtime/core/instruction_cost.h"

#include <gtest/gtest.h>

#include <string>

using namespace loom;
using namespace loom::test;

namespace {

using InstructionList =
    flatbuffers::Vector<flatbuffers::Offset<program::Instruction>>;

double listFlops(const program::Stage &stage, const InstructionList *list) {
  double total = 0;
  for (uint32_t i = 0; list && i < list->size(); ++i)
    total += instructionFlops(stage, *list->Get(i));
  return total;
}

#if defined(LOOM_PATH) && defined(LOOM_SOURCE_DIR)
TEST(InstructionCost, AStepsFlopsAreTheModelsUnderEveryStrategy) {
  // tiny.json: L 2, C 64, V 256 (a multiple of the padding's 128); global
  // batch 8 of T 32. GEMMs: 6 x tokens x (12 L C^2 + V C); causal
  // attention: 6 x L C T x tokens.
  const double L = 2, C = 64, V = 256, T = 32, tokens = 8 * T;
  const double model =
      6 * tokens * (12 * L * C * C + V * C) + 6 * L * C * T * tokens;
  for (const char *flags : kTinyTrainingStrategies) {
    SCOPED_TRACE(flags);
    program::LoadedProgram loaded;
    if (!compileExample("tiny.json", flags, loaded))
      continue;
    const program::Program &prog = *loaded.root();
    // Ranks running each stage's program: every mesh axis but pp.
    double ranksPerStage = 1;
    for (const program::MeshAxis *axis : *prog.mesh())
      if (axis->name()->str() != "pp")
        ranksPerStage *= static_cast<double>(axis->size());
    // stageStepCost: each micro-batch's pass (or pipeline chunks' lists)
    // and the update, on one rank of each stage.
    double step = 0;
    for (const program::Stage *stage : *prog.stages()) {
      double perRank = 0;
      for (const OpcodeCost &row : stageStepCost(*stage)) {
        perRank += row.cost.flops;
        if (row.opcode == program::Opcode::AdamW) {
          EXPECT_EQ(row.cost.flops, 0);
        }
      }
      step += perRank * ranksPerStage;
    }
    EXPECT_EQ(step, model);
  }
}

TEST(InstructionCost, AnEvaluationIsTheForwardsThird) {
  program::LoadedProgram loaded;
  if (!compileExample("tiny.json", "--batch 8 --seq 32", loaded))
    return;
  const program::Stage &stage = *loaded.root()->stages()->Get(0);
  const double L = 2, C = 64, V = 256, T = 32, tokens = 8 * T;
  EXPECT_EQ(listFlops(stage, stage.instructions()),
            2 * tokens * (12 * L * C * C + V * C) + 2 * L * C * T * tokens);
}

TEST(InstructionCost,
     BytesAreOperandsAndResultsOnceAndAFusedSpanReadsNoneOfItsOwn) {
  program::LoadedProgram loaded;
  if (!compileExample("tiny.json",
                      "--batch 8 --seq 32 --train --precision bf16", loaded))
    return;
  const program::Stage &stage = *loaded.root()->stages()->Get(0);
  const InstructionList &list = *stage.instructions();
  auto bytesOf = [&](uint32_t buffer) {
    return static_cast<int64_t>(program::bufferRange(stage, buffer).bytes());
  };
  const std::vector<GeluEpiloguePlan> pairs = planGeluEpilogues(stage);
  ASSERT_EQ(pairs.size(), 4u); // 2 layers, forward and backward
  int backwardPairs = 0;
  for (const GeluEpiloguePlan &p : pairs) {
    SCOPED_TRACE(p.first);
    const program::Instruction &a = *list.Get(p.first);
    const program::Instruction &b = *list.Get(p.first + 1);
    // One instruction: each distinct operand read, each result written.
    int64_t aBytes = 0;
    for (uint32_t x : *a.inputs())
      aBytes += bytesOf(x);
    for (uint32_t x : *a.outputs())
      aBytes += bytesOf(x);
    EXPECT_EQ(callCost(stage, list, p.first, 1).bytes, aBytes);
    // The pair: the second's read of the first's result (the
    // pre-activation forward, the input gradient backward) is not counted;
    // the backward's input gradient, which nothing after the pair reads
    // (the GEMM's epilogue applies the GeluGrad), is not written either.
    // The forward's pre-activation is: the GeluGrad reads it.
    const InstructionCost one = callCost(stage, list, p.first, 1);
    const InstructionCost two = callCost(stage, list, p.first + 1, 1);
    const InstructionCost pair = callCost(stage, list, p.first, 2);
    // The first's result 0 (pre-activation / input gradient) is the
    // second's operand 0 (the Gelu's input / the GeluGrad's dout).
    const uint32_t handedOver = a.outputs()->Get(0);
    ASSERT_EQ(b.inputs()->Get(0), handedOver);
    const bool backward = a.opcode() == program::Opcode::LinearGrad;
    backwardPairs += backward;
    EXPECT_EQ(pair.bytes,
              one.bytes + two.bytes - (backward ? 2 : 1) * bytesOf(handedOver));
    EXPECT_EQ(pair.flops, one.flops + two.flops);
    EXPECT_GT(one.flops, 0);
    EXPECT_EQ(two.flops, 0);
  }
  EXPECT_EQ(backwardPairs, 2);
}

TEST(InstructionCost, CollectivesAndWaitsCostNothingHere) {
  program::LoadedProgram loaded;
  if (!compileExample("tiny.json", "--batch 8 --seq 32 --train --mesh dp=2",
                      loaded))
    return;
  const program::Stage &stage = *loaded.root()->stages()->Get(0);
  int collectives = 0;
  for (const InstructionList *list :
       {stage.instructions(), stage.update_instructions()})
    for (uint32_t i = 0; list && i < list->size(); ++i) {
      const program::Opcode op = list->Get(i)->opcode();
      if (!program::isCollective(op) && op != program::Opcode::Wait)
        continue;
      ++collectives;
      const InstructionCost c = callCost(stage, *list, i, 1);
      EXPECT_EQ(c.flops, 0);
      EXPECT_EQ(c.bytes, 0);
    }
  EXPECT_GT(collectives, 0); // dp=2 all-reduces its gradients
}
#endif

} // namespace
