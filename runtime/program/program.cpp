//===- program.cpp - Program file loader ------------------------*- C++ -*-===//
//
// Three layers, each trusting only what the previous one established:
//   1. the envelope (magic, version, size, checksum),
//   2. the FlatBuffers verifier (every offset and vector inside the payload),
//   3. semantic checks (buffers inside the arena, operand counts / dtypes /
//      shapes per opcode, parameter slices, model info): verifyProgram,
//      verifier.cpp.
//
//===----------------------------------------------------------------------===//
#include "runtime/program/program.h"

#include "runtime/program/verifier_internal.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

namespace loom::program {

using detail::toVector;

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

int64_t dtypeBytes(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
    return 2;
  }
  return 0;
}

std::string opcodeName(Opcode opcode) {
  const char *n = EnumNameOpcode(opcode);
  if (n && *n)
    return n;
  return "opcode " + std::to_string(static_cast<unsigned>(opcode));
}

bool isCollective(Opcode opcode) {
  return opcode >= Opcode::AllReduce && opcode <= Opcode::Recv;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shapeNumel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t shapeNumelBefore(const std::vector<int64_t> &shape, int64_t dim) {
  int64_t n = 1;
  for (int64_t d = 0; d < dim; ++d)
    n *= shape[d];
  return n;
}

int64_t memberDim(const Instruction &ins, size_t member) {
  const auto *dims = ins.member_dims();
  return dims && dims->size() > 0
             ? dims->Get(static_cast<flatbuffers::uoffset_t>(member))
             : ins.dim();
}

std::vector<int64_t> bufferShape(const Stage &stage, uint32_t index) {
  return toVector(stage.buffers()->Get(index)->shape());
}

BufferRange bufferRange(const Stage &stage, uint32_t index) {
  const Buffer *b = stage.buffers()->Get(index);
  uint64_t bytes = static_cast<uint64_t>(dtypeBytes(b->dtype()));
  if (b->shape())
    for (int64_t d : *b->shape())
      bytes *= static_cast<uint64_t>(d);
  const uint64_t begin = (b->stash() ? stage.arena_bytes() : 0) + b->offset();
  return {begin, begin + bytes};
}

const Stage *LoadedProgram::stage(uint32_t index) const {
  if (!program || !program->stages())
    return nullptr;
  for (const Stage *s : *program->stages())
    if (s->index() == index)
      return s;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

Status loadProgramBytes(const std::string &fileBytes, const std::string &source,
                        LoadedProgram &out) {
  out.program = nullptr;
  out.storage.clear();
  out.name = source;
  // 1. Envelope.
  const uint8_t *payload = nullptr;
  size_t size = 0;
  std::string error;
  if (!decodeProgramFile(fileBytes, &payload, &size, &error))
    return Status::error("program '" + source + "': " + error);
  LOOM_CHECK(size < FLATBUFFERS_MAX_BUFFER_SIZE,
             "program '" << source << "': payload of " << size
                         << " bytes exceeds the FlatBuffers limit");
  // Copy into 8-byte aligned storage: the verifier checks alignment.
  out.storage.assign((size + 7) / 8, 0);
  if (size)
    std::memcpy(out.storage.data(), payload, size);
  const uint8_t *buf = reinterpret_cast<const uint8_t *>(out.storage.data());

  // 2. FlatBuffers structure.
  LOOM_CHECK(size >= 8 && ProgramBufferHasIdentifier(buf),
             "program '" << source
                         << "': payload is not a Loom program FlatBuffer "
                            "(missing file identifier \"LOOM\"; the compiler "
                            "must finish it with FinishProgramBuffer)");
  flatbuffers::Verifier::Options options;
  options.max_depth = 64;
  options.max_tables = 1u << 24;
  flatbuffers::Verifier verifier(buf, size, options);
  LOOM_CHECK(VerifyProgramBuffer(verifier),
             "program '" << source
                         << "': the FlatBuffer payload is malformed (the "
                            "verifier rejected an offset, vector or string); "
                            "the file is corrupt or was written by an "
                            "incompatible compiler");
  const Program *program = GetProgram(buf);

  // 3. Semantics.
  Status s = verifyProgram(*program);
  if (!s.ok())
    return s.withContext("program '" + source + "'");
  out.program = program;
  return Status::success();
}

Status loadProgramFile(const std::string &path, LoadedProgram &out) {
  out.program = nullptr;
  struct stat st;
  LOOM_CHECK(::stat(path.c_str(), &st) == 0,
             "cannot open program '" << path << "': " << std::strerror(errno));
  LOOM_CHECK(S_ISREG(st.st_mode),
             "program '" << path << "' is not a regular file");
  std::FILE *f = std::fopen(path.c_str(), "rb");
  LOOM_CHECK(f,
             "cannot open program '" << path << "': " << std::strerror(errno));
  std::string bytes;
  char chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), f)) > 0)
    bytes.append(chunk, got);
  const bool failed = std::ferror(f);
  std::fclose(f);
  LOOM_CHECK(!failed, "cannot read program '" << path << "'");
  return loadProgramBytes(bytes, path, out);
}

} // namespace loom::program
