//===- program.h - Program file loader and verifier -------------*- C++ -*-===//
//
// Reads a program file (program_envelope.h + program.fbs), runs the
// FlatBuffers verifier over the untrusted bytes, then checks what FlatBuffers
// cannot: every buffer lies inside the arena, every instruction's operands
// have the counts, dtypes and shapes its opcode needs (the same shape rules as
// the compiler's op verifiers), every parameter slice fits its global shape.
// Training programs (non-empty update_instructions) are checked too: the
// gradient and optimizer opcodes 13-25 (optimizer only in
// update_instructions, AdamW strictly in place), each parameter's grad / m / v
// buffers, the lr / step / grad_norm scalars and microbatches (dividing the
// batch; tokens hold one micro-batch of this rank's batch / dp rows).
// Collectives (opcodes 32-37) are accepted only when Program.mesh is
// non-empty: axes in range and distinct, the shape rules of each collective,
// Send / Recv on one axis with peer in range; Param.sharding must cover
// every dimension with distinct axes whose sizes multiply to global / local.
// Param.grad_sharding / moment_sharding (ZeRO) give the grad / m / v buffers
// the global shape divided per dimension by their blocks (else the param
// buffer's shape): axes in range and distinct, each dimension divisible.
// Mixed precision: every float tensor operand may be F32 or BF16 (scalars:
// the loss, dloss, lr, step, coef, norms stay F32); Cast converts F32 <-> BF16
// of one shape; Param.master_buffer is an F32 buffer of the m buffer's shape
// belonging to a BF16 parameter, and a training program's BF16 parameter
// must have one; moments stay F32, gradients may be either.
// After a successful load the executor can index buffers and run kernels
// without further checks. Every error is a Status naming the stage, the
// instruction index and its name; no input makes the loader crash.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_PROGRAM_PROGRAM_H
#define LOOM_RUNTIME_PROGRAM_PROGRAM_H

#include "runtime/core/status.h"
#include "runtime/program/program_envelope.h"
#include "runtime/program/program_generated.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom::program {

/// Bytes per element of `dtype` (0 for a value outside the enum).
int64_t dtypeBytes(DType dtype);

/// Opcode name as written in the schema ("Linear"), or "opcode <n>".
std::string opcodeName(Opcode opcode);

/// True for AllReduce .. Recv (not LocalSlice, which communicates nothing).
bool isCollective(Opcode opcode);

/// Alignment the verifier requires of every buffer offset.
constexpr uint64_t kBufferAlignment = 64;

/// A verified program: owns the payload bytes (8-byte aligned) and a pointer
/// to the root table inside them. Move-only in spirit: the root points into
/// `storage`, so it is not copyable.
class LoadedProgram {
public:
  LoadedProgram() = default;
  LoadedProgram(const LoadedProgram &) = delete;
  LoadedProgram &operator=(const LoadedProgram &) = delete;

  /// The root table (nullptr before a successful load).
  const Program *root() const { return program; }
  /// The stage whose `index` field is `index`, or nullptr.
  const Stage *stage(uint32_t index) const;
  /// Where the program came from (file path or caller-given name).
  const std::string &source() const { return name; }

private:
  friend Status loadProgramBytes(const std::string &, const std::string &,
                                 LoadedProgram &);
  friend Status loadProgramFile(const std::string &, LoadedProgram &);
  std::vector<uint64_t> storage;
  const Program *program = nullptr;
  std::string name;
};

/// Reads `path` and loads it as a program file. Errors name the file.
Status loadProgramFile(const std::string &path, LoadedProgram &out);

/// Loads a program file image (the bytes loadProgramFile reads); `source`
/// names it in errors.
Status loadProgramBytes(const std::string &fileBytes, const std::string &source,
                        LoadedProgram &out);

/// Semantic checks of an already FlatBuffers-verified program (what
/// loadProgramBytes runs after the verifier). Exposed for tests.
Status verifyProgram(const Program &program);

/// Shape of buffer `index` of `stage` (empty for a scalar). The stage must
/// have been verified.
std::vector<int64_t> bufferShape(const Stage &stage, uint32_t index);

/// The bytes of buffer `index` of `stage` in one address space for overlap
/// checks: the arena is [0, arena_bytes) and a pipeline chunk's stash slot
/// comes after it (a Buffer.stash at arena_bytes + offset), so a stash
/// buffer never seems to share bytes with an arena one. (Every chunk's slot
/// starts there: only one chunk's action runs at a time.) The stage must
/// have been verified.
struct BufferRange {
  uint64_t begin = 0, end = 0;
  uint64_t bytes() const { return end - begin; }
  bool overlaps(const BufferRange &o) const {
    return begin < o.end && o.begin < end;
  }
  bool operator==(const BufferRange &o) const {
    return begin == o.begin && end == o.end;
  }
};
BufferRange bufferRange(const Stage &stage, uint32_t index);

/// Element count of a shape (1 for a scalar); the shape must be verified.
int64_t shapeNumel(const std::vector<int64_t> &shape);

/// Element count of the dimensions before `dim`: 1 when splitting `dim`
/// leaves each block contiguous (a collective sends it as it is), more when
/// the blocks must be packed.
int64_t shapeNumelBefore(const std::vector<int64_t> &shape, int64_t dim);

/// The dimension input `member` of an AllGather / ReduceScatter splits:
/// member_dims[member] in a bucket whose members differ, `dim` otherwise.
/// The instruction must have been verified (member_dims empty or one per
/// input).
int64_t memberDim(const Instruction &ins, size_t member);

/// Shape as "[4, 64, 768]", for messages.
std::string shapeString(const std::vector<int64_t> &shape);

} // namespace loom::program

#endif // LOOM_RUNTIME_PROGRAM_PROGRAM_H
