//===- ModelFlopsTest.cpp - Parameter count, FLOPs per token, MFU ---------===//
//
// runtime/core/model_flops.h on compiled programs: the parameter count is
// the model's whatever the strategy (tensor-parallel shards and ZeRO
// shards count whole; GPT-2's tied wte, in the first and the last
// pipeline stage, once), GPT-2 124M's is llm.c's (padded vocabulary), and
// MFU's arithmetic.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/model_flops.h"

#include <gtest/gtest.h>

#include <string>

using namespace loom;
using namespace loom::test;

namespace {

#if defined(LOOM_PATH) && defined(LOOM_SOURCE_DIR)
TEST(ModelFlops, ParameterCountIsTheModelsUnderEveryStrategy) {
  // tiny.json: V 256, C 64, P 64, L 2: 256*64 + 64*64 + 2*(12*64^2 + 13*64)
  // + 2*64.
  const int64_t tiny = 120576;
  for (const char *flags : kTinyTrainingStrategies) {
    SCOPED_TRACE(flags);
    program::LoadedProgram loaded;
    if (!compileExample("tiny.json", flags, loaded))
      continue;
    EXPECT_EQ(modelParameterCount(*loaded.root()), tiny);
    // 6N + 6 L C T with T = 32.
    EXPECT_EQ(trainingFlopsPerToken(*loaded.root()),
              6.0 * tiny + 6.0 * 2 * 64 * 32);
  }
}

TEST(ModelFlops, Gpt2CountsItsPaddedVocabulary) {
  // llm.c's GPT-2 124M with Vp = 50304: 124,475,904 parameters.
  program::LoadedProgram loaded;
  if (!compileExample("gpt2-124m.json", "--batch 1 --seq 1024 --train", loaded))
    return;
  EXPECT_EQ(modelParameterCount(*loaded.root()), 124475904);
}
#endif

TEST(ModelFlops, UtilizationIsModelFlopsOverEveryDevicesPeak) {
  // 1e12 FLOPs a token at 100 tokens/s on 2 devices of 400 TFLOP/s: 1/8.
  EXPECT_DOUBLE_EQ(modelFlopsUtilization(1e12, 100, 400, 2), 0.125);
  // An unknown peak reports nothing.
  EXPECT_EQ(modelFlopsUtilization(1e12, 100, 0, 2), 0.0);
}

} // namespace
