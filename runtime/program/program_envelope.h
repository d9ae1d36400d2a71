//===- program_envelope.h - Program file header and checksum ----*- C++ -*-===//
//
// A Loom program file wraps the FlatBuffer payload (program.fbs) in a fixed
// 32-byte header so a runtime can tell a foreign file, a version it cannot
// run, a truncated copy and a corrupted one apart before parsing anything:
//
//   offset  size  field
//        0     8  magic "LOOMPROG"
//        8     4  format version (little-endian u32), kFormatVersion
//       12     4  reserved, 0
//       16     8  payload size in bytes (u64)
//       24     8  FNV-1a-64 hash of the payload (u64)
//       32     -  payload: the FlatBuffer (8-byte aligned in the file)
//
// Header-only, no exceptions and no dependencies beyond the STL: the compiler
// (built with -fno-exceptions, linking MLIR) writes files with it and the
// runtime reads them.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_PROGRAM_PROGRAM_ENVELOPE_H
#define LOOM_RUNTIME_PROGRAM_PROGRAM_ENVELOPE_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace loom::program {

/// The 8 magic bytes that open every program file.
constexpr char kProgramMagic[8] = {'L', 'O', 'O', 'M', 'P', 'R', 'O', 'G'};
/// Bytes before the payload.
constexpr size_t kProgramHeaderBytes = 32;
/// The format version this code writes and reads. Bump it only for changes an
/// older runtime cannot run (appending FlatBuffers fields does not need it).
/// 2: opcode 24 is SumSquares (it was ClipGradNorm, norm and coefficient in
/// one); a version-1 file would be misread, so it is refused.
/// 3: Param.unpadded_rows (a padded vocabulary): a version-2 runtime would
/// initialize the padding rows at random and save them, so it must refuse
/// such files.
/// 4: Buffer.stash (a pipeline chunk's kept activations live in per-micro-
/// batch stash slots, not in the arena); a version-3 runtime would run such
/// buffers at arena offsets they do not own.
/// 5: Instruction.last_microbatch_only (a DDP step's gradient all-reduces
/// run in its last micro-batch alone); a version-4 runtime would reduce the
/// accumulated gradients in every micro-batch and sum them M times over.
/// 6: Instruction.member_dims (a collective bucket's members split on
/// different dimensions); a version-5 runtime would check every member
/// against `dim` and refuse the bucket with a shape error.
constexpr uint32_t kFormatVersion = 6;

/// FNV-1a 64-bit hash of `size` bytes at `data` (the payload checksum).
inline uint64_t programChecksum(const uint8_t *data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace detail {
inline void putLE(std::string &out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline uint64_t getLE(const std::string &in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i]))
         << (8 * i);
  return v;
}
} // namespace detail

/// Wraps a FlatBuffer payload into the bytes of a program file.
inline std::string encodeProgramFile(const uint8_t *payload, size_t size) {
  std::string out;
  out.reserve(kProgramHeaderBytes + size);
  out.append(kProgramMagic, sizeof(kProgramMagic));
  detail::putLE(out, kFormatVersion, 4);
  detail::putLE(out, 0, 4);
  detail::putLE(out, size, 8);
  detail::putLE(out, programChecksum(payload, size), 8);
  if (size)
    out.append(reinterpret_cast<const char *>(payload), size);
  return out;
}

/// Checks the header of a program file image and points `*payload` /
/// `*size` at the FlatBuffer inside `file`. On failure returns false and sets
/// `*error` (when non-null) to one sentence saying what is wrong and what to
/// do: not a Loom program (bad magic), unsupported version, truncated (or
/// with trailing bytes), checksum mismatch (corrupt).
inline bool decodeProgramFile(const std::string &file, const uint8_t **payload,
                              size_t *size, std::string *error) {
  auto fail = [&](const std::string &message) {
    if (error)
      *error = message;
    return false;
  };
  if (file.size() < sizeof(kProgramMagic) ||
      std::memcmp(file.data(), kProgramMagic, sizeof(kProgramMagic)) != 0)
    return fail("not a Loom program (bad magic; expected the file to start "
                "with \"LOOMPROG\"); pass a file written by loom-translate");
  if (file.size() < kProgramHeaderBytes)
    return fail("truncated program file: file has " +
                std::to_string(file.size()) +
                " bytes, the header alone needs " +
                std::to_string(kProgramHeaderBytes));
  const uint64_t version = detail::getLE(file, 8, 4);
  if (version != kFormatVersion)
    return fail("program format version " + std::to_string(version) +
                " unsupported (this runtime reads version " +
                std::to_string(kFormatVersion) +
                "); recompile the program with a matching loom-translate");
  const uint64_t reserved = detail::getLE(file, 12, 4);
  if (reserved != 0)
    return fail("program header field 'reserved' is " +
                std::to_string(reserved) +
                " (expected 0): the file is corrupt or from a newer format; "
                "recompile the program");
  const uint64_t declared = detail::getLE(file, 16, 8);
  const uint64_t available = file.size() - kProgramHeaderBytes;
  if (declared != available) {
    // Compare sizes without overflowing on a corrupt 64-bit length.
    const bool over = declared > available;
    std::string expected = declared > UINT64_MAX - kProgramHeaderBytes
                               ? std::string("more than 2^64")
                               : std::to_string(declared + kProgramHeaderBytes);
    return fail(std::string(over ? "truncated program file"
                                 : "program file has trailing bytes") +
                ": file has " + std::to_string(file.size()) +
                " bytes, header says " + expected +
                " (32-byte header + payload); the copy is incomplete or "
                "corrupt, recompile or copy it again");
  }
  const uint8_t *data =
      reinterpret_cast<const uint8_t *>(file.data()) + kProgramHeaderBytes;
  const uint64_t stored = detail::getLE(file, 24, 8);
  if (programChecksum(data, available) != stored)
    return fail("checksum mismatch: the program payload does not match its "
                "FNV-1a hash (corrupt file); recompile or copy it again");
  if (payload)
    *payload = data;
  if (size)
    *size = static_cast<size_t>(available);
  return true;
}

} // namespace loom::program

#endif // LOOM_RUNTIME_PROGRAM_PROGRAM_ENVELOPE_H
