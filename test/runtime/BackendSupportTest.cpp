//===- BackendSupportTest.cpp - Refusing programs a backend cannot run ----===//
//
// loom-run checks a program against --backend right after loading it
// (runtime/core/backend_support.h). These tests run without a GPU: the check
// reads only the instruction streams. Supported programs pass after a real
// load (verified); the refusals use instructions renamed in place, which the
// check sees exactly as it would see a verified program's.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/backend_support.h"

#include <gtest/gtest.h>

using namespace loom;
using namespace loom::test;

namespace {

/// The packed root of `p` (no envelope, no verification).
struct Packed {
  explicit Packed(const fb::ProgramT &p) {
    fbb.Finish(fb::Program::Pack(fbb, &p));
  }
  const fb::Program &root() const {
    return *flatbuffers::GetRoot<fb::Program>(fbb.GetBufferPointer());
  }
  flatbuffers::FlatBufferBuilder fbb;
};

fb::InstructionT &findInstruction(fb::ProgramT &p, const std::string &name) {
  for (auto &ins : p.stages[0]->instructions)
    if (ins->name == name)
      return *ins;
  ADD_FAILURE() << "no instruction named " << name;
  return *p.stages[0]->instructions[0];
}

} // namespace

TEST(BackendSupport, TrainingProgramsRunOnBothBackends) {
  // miniGptTrain holds every opcode of a single-rank GPT-2 train step
  // (forward, backward, clipping, AdamW): the CUDA kernels cover all of them.
  for (bool pipelined : {false, true}) {
    auto p = miniGptTrain();
    if (pipelined)
      makeSingleChunkPipeline(*p);
    fb::LoadedProgram loaded;
    Status s = fb::loadProgramBytes(serialize(*p), "mini.loom", loaded);
    ASSERT_TRUE(s.ok()) << s.toString();
    EXPECT_TRUE(missingKernels(*loaded.root(), KernelBackendKind::Cuda).empty());
    EXPECT_TRUE(checkBackendSupports(*loaded.root(), "mini.loom",
                                     KernelBackendKind::Cuda)
                    .ok());
    EXPECT_TRUE(checkBackendSupports(*loaded.root(), "mini.loom",
                                     KernelBackendKind::Cpu)
                    .ok());
  }
}

TEST(BackendSupport, CudaRefusalNamesEveryMissingKernel) {
  auto p = miniGptTrain();
  // Vocab-parallel cross entropy and a transpose, as a tp program has them.
  findInstruction(*p, "h.0.mlp.gelu").opcode = fb::Opcode::RowMax;
  findInstruction(*p, "h.0.res1").opcode = fb::Opcode::Transpose;
  findInstruction(*p, "h.0.res2").opcode = fb::Opcode::Transpose;
  findInstruction(*p, "wte").axes = {0}; // vocab-parallel embedding
  Packed packed(*p);

  const auto missing = missingKernels(packed.root(), KernelBackendKind::Cuda);
  ASSERT_EQ(missing.size(), 3u);
  EXPECT_EQ(missing[0].kernel, "Embedding (vocab-parallel rows)");
  EXPECT_EQ(missing[0].count, 1);
  EXPECT_EQ(missing[0].firstName, "wte");
  EXPECT_EQ(missing[1].kernel, "Transpose");
  EXPECT_EQ(missing[1].count, 2);
  EXPECT_EQ(missing[1].firstName, "h.0.res1");
  EXPECT_EQ(missing[1].firstStage, 0u);
  EXPECT_EQ(missing[2].kernel, "RowMax");

  Status s = checkBackendSupports(packed.root(), "tp.loom",
                                  KernelBackendKind::Cuda);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--backend cuda cannot run program 'tp.loom': "
                             "the cuda backend has no kernel for Embedding "
                             "(vocab-parallel rows) (1 instruction, first "
                             "'wte' in stage 0); Transpose (2 instructions, "
                             "first 'h.0.res1' in stage 0); RowMax"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("run it with --backend cpu"), std::string::npos);
  // The CPU executor runs all of it.
  EXPECT_TRUE(missingKernels(packed.root(), KernelBackendKind::Cpu).empty());
}

TEST(BackendSupport, LooksIntoPipelineChunksAndTheUpdate) {
  auto p = miniGptTrain();
  makeSingleChunkPipeline(*p);
  fb::StageT &st = *p->stages[0];
  st.index = 3;
  auto &chunk = *st.pipeline->chunks[0];
  for (auto &ins : chunk.backward)
    if (ins->name == "loss.grad")
      ins->opcode = fb::Opcode::CrossEntropySumsGrad;
  st.update_instructions[0]->opcode = fb::Opcode::CrossEntropyFromSums;
  Packed packed(*p);
  const auto missing = missingKernels(packed.root(), KernelBackendKind::Cuda);
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_EQ(missing[0].kernel, "CrossEntropySumsGrad");
  EXPECT_EQ(missing[0].firstName, "loss.grad");
  EXPECT_EQ(missing[0].firstStage, 3u);
  EXPECT_EQ(missing[1].kernel, "CrossEntropyFromSums");
  EXPECT_EQ(missing[1].firstName, "sum_squares");
}
