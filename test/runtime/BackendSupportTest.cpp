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

TEST(BackendSupport, VocabParallelAndTransposeRunOnCuda) {
  // The opcodes written for the CPU after the first CUDA kernels (tp's
  // vocab-parallel embedding and cross entropy, transposes) have CUDA
  // kernels now (vocab_parallel.cu, transpose.cu).
  auto p = miniGptTrain();
  findInstruction(*p, "h.0.mlp.gelu").opcode = fb::Opcode::RowMax;
  findInstruction(*p, "h.0.res1").opcode = fb::Opcode::CrossEntropySums;
  findInstruction(*p, "h.0.res2").opcode = fb::Opcode::Transpose;
  findInstruction(*p, "loss").opcode = fb::Opcode::CrossEntropyFromSums;
  findInstruction(*p, "loss.grad").opcode = fb::Opcode::CrossEntropySumsGrad;
  findInstruction(*p, "wte").axes = {0}; // vocab-parallel embedding
  Packed packed(*p);
  EXPECT_TRUE(missingKernels(packed.root(), KernelBackendKind::Cuda).empty());
}

TEST(BackendSupport, CudaRefusalNamesEveryMissingKernel) {
  // Opcodes this runtime does not know (a program from a newer compiler;
  // 31 is unassigned in program.fbs): refused by number, counted, with the
  // first instruction that uses each.
  auto p = miniGptTrain();
  findInstruction(*p, "h.0.res1").opcode = static_cast<fb::Opcode>(31);
  findInstruction(*p, "h.0.res2").opcode = static_cast<fb::Opcode>(31);
  findInstruction(*p, "h.0.mlp.gelu").opcode = static_cast<fb::Opcode>(45);
  Packed packed(*p);

  const auto missing = missingKernels(packed.root(), KernelBackendKind::Cuda);
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_EQ(missing[0].kernel, "opcode 31");
  EXPECT_EQ(missing[0].count, 2);
  EXPECT_EQ(missing[0].firstName, "h.0.res1");
  EXPECT_EQ(missing[0].firstStage, 0u);
  EXPECT_EQ(missing[1].kernel, "opcode 45");
  EXPECT_EQ(missing[1].count, 1);
  EXPECT_EQ(missing[1].firstName, "h.0.mlp.gelu");

  Status s =
      checkBackendSupports(packed.root(), "new.loom", KernelBackendKind::Cuda);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--backend cuda cannot run program 'new.loom': "
                             "the cuda backend has no kernel for opcode 31 (2 "
                             "instructions, first 'h.0.res1' in stage 0); "
                             "opcode 45 (1 instruction, first 'h.0.mlp.gelu' "
                             "in stage 0); run it with --backend cpu"),
            std::string::npos)
      << s.message();
  // The CPU backend is not second-guessed here (the verifier and the
  // executor report an unknown opcode themselves).
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
      ins->opcode = static_cast<fb::Opcode>(60);
  st.update_instructions[0]->opcode = static_cast<fb::Opcode>(61);
  Packed packed(*p);
  const auto missing = missingKernels(packed.root(), KernelBackendKind::Cuda);
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_EQ(missing[0].kernel, "opcode 60");
  EXPECT_EQ(missing[0].firstName, "loss.grad");
  EXPECT_EQ(missing[0].firstStage, 3u);
  EXPECT_EQ(missing[1].kernel, "opcode 61");
  EXPECT_EQ(missing[1].firstName, "sum_squares");
}
