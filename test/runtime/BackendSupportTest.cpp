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
#include "runtime/core/bf16_staging.h"

#include <cstdio>
#include <cstdlib>
#include <functional>

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

//===----------------------------------------------------------------------===//
// bf16 on CUDA: no instruction of a compiled bf16 program may fall back to
// the executor's fp32 staging (it converts around the kernel: far too slow
// for the GPU's MFU goal).
//===----------------------------------------------------------------------===//

TEST(BackendSupport, EveryStagingOpcodeHasANativeCudaBF16Kernel) {
  // Every opcode whose BF16 operands the executor would stage (compute,
  // gradient, loss and optimizer opcodes) must be one CudaKernels runs on
  // bf16 itself; a new opcode added to the schema fails here until it has
  // a bf16 kernel (runtime/cuda/kernels_bf16.h) or is declared data
  // movement in bf16_staging.cpp.
  for (fb::Opcode op : fb::EnumValuesOpcode()) {
    if (stagesBF16Operands(op)) {
      EXPECT_TRUE(cudaRunsBF16Natively(op)) << fb::EnumNameOpcode(op);
    }
  }
  EXPECT_FALSE(cudaRunsBF16Natively(fb::Opcode::Cast)); // converts itself
  EXPECT_FALSE(cudaRunsBF16Natively(fb::Opcode::AllReduce));
}

TEST(BackendSupport, HandBuiltBF16GptStagesNothingOnCuda) {
  // The hand-built GPT train step in bf16 (every opcode of a single-rank
  // step) has BF16 operands on most instructions and none the CUDA backend
  // would stage; its fp32 twin has nothing to stage at all.
  auto p = miniGptTrain();
  makeMixedPrecision(*p);
  fb::LoadedProgram loaded;
  Status s = fb::loadProgramBytes(serialize(*p), "mini.loom", loaded);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_TRUE(cudaBF16StagedKernels(*loaded.root()).empty());
  auto fp32 = miniGptTrain();
  fb::LoadedProgram loaded32;
  ASSERT_TRUE(
      fb::loadProgramBytes(serialize(*fp32), "mini32.loom", loaded32).ok());
  EXPECT_TRUE(cudaBF16StagedKernels(*loaded32.root()).empty());
}

#if defined(LOOM_PATH) && defined(LOOM_SOURCE_DIR)
namespace {

/// Compiles `config` with `loom compile ... --precision bf16` and loads it.
bool compileBF16(const std::string &config, const std::string &flags,
                 fb::LoadedProgram &loaded) {
  return compileExample(config, flags + " --precision bf16", loaded);
}

/// Instructions of `program` with at least one BF16 operand.
int64_t bf16Instructions(const fb::Program &program) {
  int64_t n = 0;
  for (const fb::Stage *stage : *program.stages()) {
    auto count = [&](const auto *list) {
      if (list)
        for (const fb::Instruction *ins : *list)
          if (!planBF16Staging(*stage, *ins).empty())
            ++n;
    };
    count(stage->instructions());
    count(stage->update_instructions());
    if (stage->pipeline() && stage->pipeline()->chunks())
      for (const auto *chunk : *stage->pipeline()->chunks()) {
        count(chunk->forward());
        count(chunk->backward());
      }
  }
  return n;
}

} // namespace

TEST(BackendSupport, CompiledBF16ProgramsRunNativelyOnCuda) {
  // What `loom compile --precision bf16` emits for the tiny model (plain,
  // micro-batched, vocab-parallel tp=2 with ZeRO-1, a pipeline stage, fp32
  // gradients) and for
  // GPT-2 124M: every instruction with BF16 operands runs natively on CUDA.
  const std::pair<const char *, const char *> cases[] = {
      {"tiny.json", "--batch 4 --seq 32 --train"},
      {"tiny.json", "--batch 4 --seq 32 --train --microbatches 2 "
                    "--recompute full"},
      {"tiny.json", "--batch 8 --seq 32 --train --mesh dp=2,tp=2 --zero 1"},
      {"tiny.json", "--batch 4 --seq 32 --train --mesh pp=2 --microbatches 2"},
      {"tiny.json", "--batch 4 --seq 32"}, // evaluation
      // fp32 gradients: widening casts, fp32 accumulation and reductions.
      {"tiny.json", "--batch 8 --seq 32 --train --microbatches 2 "
                    "--mesh dp=2,tp=2 --zero 1 --grad-precision fp32"},
      {"gpt2-124m.json", "--batch 4 --seq 1024 --train"},
  };
  for (const auto &[config, flags] : cases) {
    fb::LoadedProgram loaded;
    if (!compileBF16(config, flags, loaded))
      continue;
    EXPECT_GT(bf16Instructions(*loaded.root()), 10) << config << " " << flags;
    for (const MissingKernel &m : cudaBF16StagedKernels(*loaded.root()))
      ADD_FAILURE() << config << " " << flags << ": " << m.kernel << " ("
                    << m.count << " instructions, first '" << m.firstName
                    << "') would run staged on CUDA";
  }
}
#endif
