//===- backend_support.cpp - Which opcodes each kernel backend runs -------===//
//
// The CUDA table below lists what runtime/cuda/ provides: cuBLASLt GEMMs
// (gemm.h), the fused kernels (kernels.h, attention.cu), slice / concat
// (tensor_movement.h) and the NCCL collectives (comm_nccl.h). When a CUDA
// kernel lands, its opcode moves from "missing" to "supported" here; when the
// schema gains an opcode, -Wswitch flags this file until it is classified.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/backend_support.h"

#include "runtime/core/bf16_staging.h"

#include <map>

namespace loom {

using program::Instruction;
using program::Opcode;

const char *backendName(KernelBackendKind backend) {
  return backend == KernelBackendKind::Cpu ? "cpu" : "cuda";
}

namespace {

/// Empty when the CUDA backend has a kernel for `ins`, else what it lacks.
/// Today every opcode of the schema has one (cuda::CudaKernels); a new
/// opcode is a -Wswitch warning here until its kernel exists or it is
/// listed as missing, and an opcode this runtime does not know (a newer
/// program) is refused by name.
std::string cudaGap(const Instruction &ins) {
  const Opcode op = ins.opcode();
  switch (op) {
  case Opcode::Embedding:
  case Opcode::Add:
  case Opcode::Linear:
  case Opcode::Matmul:
  case Opcode::LayerNorm:
  case Opcode::Gelu:
  case Opcode::Attention:
  case Opcode::Softmax:
  case Opcode::CrossEntropy:
  case Opcode::Copy:
  case Opcode::Transpose: // transpose.cu
  case Opcode::Slice:
  case Opcode::Concat:
  case Opcode::EmbeddingGrad:
  case Opcode::ReduceLeading:
  case Opcode::LinearGrad:
  case Opcode::MatmulGrad:
  case Opcode::LayerNormGrad:
  case Opcode::GeluGrad:
  case Opcode::AttentionGrad:
  case Opcode::SoftmaxGrad:
  case Opcode::CrossEntropyGrad:
  case Opcode::SliceGrad:
  case Opcode::Fill:
  case Opcode::SumSquares:
  case Opcode::AdamW:
  case Opcode::ClipCoef:
  // Vocab-parallel cross entropy and embedding rows: vocab_parallel.cu.
  case Opcode::RowMax:
  case Opcode::CrossEntropySums:
  case Opcode::CrossEntropyFromSums:
  case Opcode::CrossEntropySumsGrad:
  case Opcode::LocalSlice: // cuda::sliceDim at the rank's block offset
  case Opcode::AllReduce:
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
  case Opcode::AllToAll:
  case Opcode::Send:
  case Opcode::Recv:
  case Opcode::Cast: // convert.cu (also the bf16 staging of every opcode)
  case Opcode::Wait: // no kernel: the executor completes collectives
    return {};
  }
  // A value outside the enum cannot pass the verifier; name it anyway.
  return program::opcodeName(op);
}

using InstructionList =
    flatbuffers::Vector<flatbuffers::Offset<program::Instruction>>;

/// Every instruction of every list of every stage for which `gapOf` names a
/// gap, grouped by gap in order of first appearance.
template <typename GapOf>
std::vector<MissingKernel> collectGaps(const program::Program &program,
                                       GapOf gapOf) {
  std::vector<MissingKernel> missing;
  if (!program.stages())
    return missing;
  std::map<std::string, size_t> slot; // kernel -> index into `missing`
  auto visit = [&](const program::Stage &st, const InstructionList *list,
                   uint32_t stage) {
    if (!list)
      return;
    for (const Instruction *ins : *list) {
      const std::string gap = gapOf(st, *ins);
      if (gap.empty())
        continue;
      auto [it, fresh] = slot.emplace(gap, missing.size());
      if (fresh) {
        MissingKernel m;
        m.kernel = gap;
        m.firstStage = stage;
        m.firstName = ins->name() ? ins->name()->str() : std::string();
        missing.push_back(std::move(m));
      }
      ++missing[it->second].count;
    }
  };
  for (const program::Stage *stage : *program.stages()) {
    const uint32_t index = stage->index();
    visit(*stage, stage->instructions(), index);
    if (const program::Pipeline *pipe = stage->pipeline();
        pipe && pipe->chunks()) {
      for (const program::PipelineChunk *chunk : *pipe->chunks()) {
        visit(*stage, chunk->forward(), index);
        visit(*stage, chunk->backward(), index);
      }
    }
    visit(*stage, stage->update_instructions(), index);
  }
  return missing;
}

} // namespace

std::vector<MissingKernel> missingKernels(const program::Program &program,
                                          KernelBackendKind backend) {
  if (backend == KernelBackendKind::Cpu)
    return {}; // the CPU executor runs every opcode the verifier accepts
  return collectGaps(program,
                     [](const program::Stage &, const Instruction &ins) {
                       return cudaGap(ins);
                     });
}

bool cudaRunsBF16Natively(Opcode op) {
  switch (op) {
  case Opcode::Embedding:
  case Opcode::EmbeddingGrad:
  case Opcode::Add:
  case Opcode::ReduceLeading:
  case Opcode::Linear:
  case Opcode::LinearGrad:
  case Opcode::Matmul:
  case Opcode::MatmulGrad:
  case Opcode::LayerNorm:
  case Opcode::LayerNormGrad:
  case Opcode::Gelu:
  case Opcode::GeluGrad:
  case Opcode::Softmax:
  case Opcode::SoftmaxGrad:
  case Opcode::Attention:
  case Opcode::AttentionGrad:
  case Opcode::CrossEntropy:
  case Opcode::CrossEntropyGrad:
  case Opcode::RowMax:
  case Opcode::CrossEntropySums:
  case Opcode::CrossEntropyFromSums:
  case Opcode::CrossEntropySumsGrad:
  case Opcode::Fill:
  case Opcode::SumSquares:
  case Opcode::ClipCoef:
  case Opcode::AdamW:
    return true;
  default:
    return false;
  }
}

std::vector<MissingKernel>
cudaBF16StagedKernels(const program::Program &program) {
  return collectGaps(program,
                     [](const program::Stage &stage, const Instruction &ins) {
                       if (cudaRunsBF16Natively(ins.opcode()))
                         return std::string();
                       return planBF16Staging(stage, ins).empty()
                                  ? std::string()
                                  : program::opcodeName(ins.opcode());
                     });
}

Status checkBackendSupports(const program::Program &program,
                            const std::string &source,
                            KernelBackendKind backend) {
  const std::vector<MissingKernel> missing = missingKernels(program, backend);
  if (missing.empty())
    return Status::success();
  std::ostringstream list;
  for (size_t i = 0; i < missing.size(); ++i) {
    const MissingKernel &m = missing[i];
    list << (i ? "; " : "") << m.kernel << " (" << m.count
         << (m.count == 1 ? " instruction" : " instructions") << ", first '"
         << m.firstName << "' in stage " << m.firstStage << ")";
  }
  LOOM_ERROR("--backend " << backendName(backend) << " cannot run program '"
                          << source << "': the " << backendName(backend)
                          << " backend has no kernel for " << list.str()
                          << "; run it with --backend cpu (or compile it "
                             "without the strategy that needs these)");
}

} // namespace loom
