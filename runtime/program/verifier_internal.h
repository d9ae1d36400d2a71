//===- verifier_internal.h - What the verifier files share ------*- C++ -*-===//
//
// Private to runtime/program (not part of program.h): the operand helpers,
// the per-stage facts the buffer checks establish, and InstructionChecker,
// whose opcode families are checked in instruction_checker.cpp (operands,
// data movement, collectives, cast) and instruction_checker_compute.cpp
// (compute, gradient / optimizer, vocab-parallel loss); verifier.cpp runs
// it over every instruction list.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_PROGRAM_VERIFIER_INTERNAL_H
#define LOOM_RUNTIME_PROGRAM_VERIFIER_INTERNAL_H

#include "runtime/program/program.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom::program::detail {

/// The schema's name of `dtype`, or "unknown".
inline const char *dtypeLabel(DType dtype) {
  const char *n = EnumNameDType(dtype);
  return (n && *n) ? n : "unknown";
}

/// A FlatBuffers vector (nullptr: empty) as a std::vector.
inline std::vector<int64_t> toVector(const flatbuffers::Vector<int64_t> *v) {
  std::vector<int64_t> out;
  if (v)
    out.assign(v->begin(), v->end());
  return out;
}

inline std::vector<uint32_t> toVector(const flatbuffers::Vector<uint32_t> *v) {
  std::vector<uint32_t> out;
  if (v)
    out.assign(v->begin(), v->end());
  return out;
}

/// A FlatBuffers string (nullptr: empty) as a std::string.
inline std::string nameOf(const flatbuffers::String *s) {
  return s ? s->str() : std::string();
}

/// Per-stage facts established by the buffer checks, used by the
/// instruction checks.
struct StageFacts {
  uint32_t stageIndex = 0;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DType> dtypes;
  /// offsets: program::bufferRange's (a stash buffer's after the arena);
  /// slotOffsets: a stash buffer's Buffer.offset in its slot, -1 for an
  /// arena buffer.
  std::vector<uint64_t> offsets, bytes;
  std::vector<int64_t> slotOffsets;
  /// Program.mesh axis sizes (empty: a single rank).
  std::vector<int64_t> mesh;
};

/// Checks one instruction; `prefix` names stage, index and name.
class InstructionChecker {
public:
  InstructionChecker(const StageFacts &facts, const Instruction &ins,
                     std::string prefix)
      : facts(facts), ins(ins), prefix(std::move(prefix)),
        inputs(toVector(ins.inputs())), outputs(toVector(ins.outputs())),
        scratch(toVector(ins.scratch())) {}

  Status check();

private:
  const std::vector<int64_t> &shape(uint32_t b) const {
    return facts.shapes[b];
  }
  /// Operand counts (outputs: nOut, or nOut to maxOut when maxOut > nOut),
  /// indices in range, scratch and outputs disjoint from the other operands.
  Status counts(size_t minIn, size_t maxIn, size_t nOut, size_t maxScratch,
                size_t maxOut = 0);
  bool overlaps(uint32_t a, uint32_t b) const {
    return facts.offsets[a] < facts.offsets[b] + facts.bytes[b] &&
           facts.offsets[b] < facts.offsets[a] + facts.bytes[a];
  }
  Status scalar(uint32_t b, const char *role);
  Status dtype(uint32_t b, DType want, const char *role);
  /// A float tensor operand: F32, or BF16 (mixed precision: the runtime
  /// stores bf16 and computes in fp32). Scalars go through scalar(): F32.
  Status floating(uint32_t b, const char *role);
  Status sameShape(uint32_t b, const std::vector<int64_t> &want,
                   const char *role);
  Status numel(uint32_t b, int64_t want, const char *role);
  Status checkCompute();
  Status checkMovement();
  Status checkTraining();
  Status checkVocabParallelLoss();
  Status checkCollective();
  Status checkCast();
  Status checkWait();
  /// `axes` of an op reading a vocabulary shard (Embedding, the vocab-
  /// parallel loss): none, or distinct axes of a non-empty mesh.
  Status checkShardAxes();
  /// Layer norm (forward or gradient) over rows of `x`: epsilon in (0, 1),
  /// scratch empty or [mean, rstd] with one value per row.
  Status checkLayerNormStats(const std::vector<int64_t> &x);
  /// Matmul / MatmulGrad: `lhs` [..., M, K] times `rhs` [K, N] ([N, K]
  /// with transpose_rhs); `want` is the product's shape [..., M, N].
  Status matmulResultShape(uint32_t lhs, uint32_t rhs,
                           std::vector<int64_t> &want);
  Status checkAttentionShape(const std::vector<int64_t> &q,
                             const std::vector<int64_t> &out, const char *role);
  /// Buffer `b` is attention's f32 log-sum-exp [B, NH, T] for qkv `q`.
  Status checkAttentionRowStats(const std::vector<int64_t> &q, uint32_t b,
                                const char *role);

  const StageFacts &facts;
  const Instruction &ins;
  std::string prefix;
  std::vector<uint32_t> inputs, outputs, scratch;
};

/// LOOM_CHECK inside InstructionChecker: the message starts with `prefix`
/// (stage, instruction index and name).
#define INSTR_CHECK(cond, streamExpr)                                          \
  LOOM_CHECK(cond, prefix << ": " << streamExpr)

} // namespace loom::program::detail

#endif // LOOM_RUNTIME_PROGRAM_VERIFIER_INTERNAL_H
