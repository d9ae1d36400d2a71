//===- program.cpp - Program file loader and verifier ----------*- C++ -*-===//
//
// Three layers, each trusting only what the previous one established:
//   1. the envelope (magic, version, size, checksum),
//   2. the FlatBuffers verifier (every offset and vector inside the payload),
//   3. semantic checks (buffers inside the arena, operand counts / dtypes /
//      shapes per opcode, parameter slices, model info).
//
//===----------------------------------------------------------------------===//
#include "runtime/program/program.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sys/stat.h>

namespace loom::program {

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

static const char *dtypeLabel(DType dtype) {
  const char *n = EnumNameDType(dtype);
  return (n && *n) ? n : "unknown";
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

static std::vector<int64_t> toVector(const flatbuffers::Vector<int64_t> *v) {
  std::vector<int64_t> out;
  if (v)
    out.assign(v->begin(), v->end());
  return out;
}

static std::vector<uint32_t> toVector(const flatbuffers::Vector<uint32_t> *v) {
  std::vector<uint32_t> out;
  if (v)
    out.assign(v->begin(), v->end());
  return out;
}

static std::string nameOf(const flatbuffers::String *s) {
  return s ? s->str() : std::string();
}

std::vector<int64_t> bufferShape(const Stage &stage, uint32_t index) {
  return toVector(stage.buffers()->Get(index)->shape());
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
// Buffers
//===----------------------------------------------------------------------===//

namespace {

/// The largest rank the runtime accepts (GPT-2 needs 4).
constexpr size_t kMaxRank = 16;

/// Per-stage facts established by the buffer checks, used by the
/// instruction checks.
struct StageFacts {
  uint32_t stageIndex = 0;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DType> dtypes;
  std::vector<uint64_t> offsets, bytes;
  /// Program.mesh axis sizes (empty: a single rank).
  std::vector<int64_t> mesh;
};

Status checkBuffers(const Stage &stage, StageFacts &facts) {
  const uint32_t si = stage.index();
  const uint64_t arena = stage.arena_bytes();
  const auto *buffers = stage.buffers();
  const uint32_t n = buffers ? buffers->size() : 0;
  for (uint32_t j = 0; j < n; ++j) {
    const Buffer *b = buffers->Get(j);
    const std::string label = "stage " + std::to_string(si) + ", buffer #" +
                              std::to_string(j) + " '" + nameOf(b->name()) +
                              "'";
    const int64_t esize = dtypeBytes(b->dtype());
    LOOM_CHECK(esize > 0, label << ": unknown dtype "
                                << static_cast<int>(b->dtype())
                                << " (this runtime knows F32, I32, BF16)");
    std::vector<int64_t> shape = toVector(b->shape());
    LOOM_CHECK(shape.size() <= kMaxRank,
               label << ": rank " << shape.size() << " exceeds " << kMaxRank);
    int64_t numel = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      LOOM_CHECK(shape[d] > 0, label << ": dimension " << d << " of shape "
                                     << shapeString(shape)
                                     << " is not positive");
      LOOM_CHECK(numel <= std::numeric_limits<int64_t>::max() / 8 / shape[d],
                 label << ": shape " << shapeString(shape)
                       << " has too many elements");
      numel *= shape[d];
    }
    const uint64_t bytes = static_cast<uint64_t>(numel * esize);
    const uint64_t offset = b->offset();
    LOOM_CHECK(offset % kBufferAlignment == 0,
               label << ": offset " << offset << " is not aligned to "
                     << kBufferAlignment << " bytes");
    LOOM_CHECK(offset <= arena && bytes <= arena - offset,
               label << ": bytes [" << offset << ", " << offset << " + "
                     << bytes << ") of shape " << shapeString(shape) << " "
                     << dtypeLabel(b->dtype()) << " leave the arena of "
                     << arena << " bytes");
    facts.shapes.push_back(std::move(shape));
    facts.dtypes.push_back(b->dtype());
    facts.offsets.push_back(offset);
    facts.bytes.push_back(bytes);
  }
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

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
  /// `axes` of an op reading a vocabulary shard (Embedding, the vocab-
  /// parallel loss): none, or distinct axes of a non-empty mesh.
  Status checkShardAxes();
  /// Layer norm (forward or gradient) over rows of `x`: epsilon in (0, 1),
  /// scratch empty or [mean, rstd] with one value per row.
  Status checkLayerNormStats(const std::vector<int64_t> &x);
  Status checkAttentionShape(const std::vector<int64_t> &q,
                             const std::vector<int64_t> &out, const char *role);

  const StageFacts &facts;
  const Instruction &ins;
  std::string prefix;
  std::vector<uint32_t> inputs, outputs, scratch;
};

#define INSTR_CHECK(cond, streamExpr)                                          \
  LOOM_CHECK(cond, prefix << ": " << streamExpr)

Status InstructionChecker::checkLayerNormStats(const std::vector<int64_t> &x) {
  const double eps = ins.epsilon();
  INSTR_CHECK(eps > 0.0 && eps < 1.0, "epsilon must be in (0, 1), got " << eps);
  INSTR_CHECK(scratch.empty() || scratch.size() == 2,
              "scratch must be empty or [mean, rstd], got " << scratch.size()
                                                            << " buffers");
  const int64_t rows = shapeNumel(x) / x.back();
  for (uint32_t b : scratch) {
    LOOM_RETURN_IF_ERROR(floating(b, "scratch"));
    LOOM_RETURN_IF_ERROR(numel(b, rows, "scratch (mean / rstd)"));
  }
  return Status::success();
}

Status InstructionChecker::counts(size_t minIn, size_t maxIn, size_t nOut,
                                  size_t maxScratch, size_t maxOut) {
  const std::string op = opcodeName(ins.opcode());
  INSTR_CHECK(inputs.size() >= minIn && inputs.size() <= maxIn,
              op << " takes " << minIn
                 << (maxIn == minIn      ? ""
                     : maxIn == SIZE_MAX ? " or more"
                                         : " to " + std::to_string(maxIn))
                 << " inputs, got " << inputs.size());
  if (maxOut <= nOut)
    INSTR_CHECK(outputs.size() == nOut,
                op << " has " << nOut << " output(s), got " << outputs.size());
  else
    INSTR_CHECK(outputs.size() >= nOut && outputs.size() <= maxOut,
                op << " has " << nOut << " to " << maxOut << " outputs, got "
                   << outputs.size());
  INSTR_CHECK(scratch.size() <= maxScratch,
              op << " takes at most " << maxScratch << " scratch buffers, got "
                 << scratch.size());
  const size_t n = facts.shapes.size();
  auto inRange = [&](const std::vector<uint32_t> &v,
                     const char *what) -> Status {
    for (size_t k = 0; k < v.size(); ++k)
      INSTR_CHECK(v[k] < n, what << " #" << k << " is buffer " << v[k]
                                 << ", but the stage has " << n << " buffers");
    return Status::success();
  };
  LOOM_RETURN_IF_ERROR(inRange(inputs, "input"));
  LOOM_RETURN_IF_ERROR(inRange(outputs, "output"));
  LOOM_RETURN_IF_ERROR(inRange(scratch, "scratch"));
  // Scratch is the kernel's own memory: it may not share bytes with an
  // operand (the kernel would overwrite its own input).
  auto overlap = [&](uint32_t a, uint32_t b) {
    return facts.offsets[a] < facts.offsets[b] + facts.bytes[b] &&
           facts.offsets[b] < facts.offsets[a] + facts.bytes[a];
  };
  for (size_t k = 0; k < scratch.size(); ++k) {
    for (uint32_t other : inputs)
      INSTR_CHECK(!overlap(scratch[k], other),
                  "scratch #" << k << " (buffer " << scratch[k]
                              << ") overlaps input buffer " << other);
    for (uint32_t other : outputs)
      INSTR_CHECK(!overlap(scratch[k], other),
                  "scratch #" << k << " (buffer " << scratch[k]
                              << ") overlaps output buffer " << other);
    for (size_t m = k + 1; m < scratch.size(); ++m)
      INSTR_CHECK(!overlap(scratch[k], scratch[m]),
                  "scratch #" << k << " overlaps scratch #" << m);
  }
  // Several outputs are written independently: they may not share bytes.
  for (size_t k = 0; k < outputs.size(); ++k)
    for (size_t m = k + 1; m < outputs.size(); ++m)
      INSTR_CHECK(!overlap(outputs[k], outputs[m]),
                  "output #" << k << " (buffer " << outputs[k]
                             << ") overlaps output #" << m << " (buffer "
                             << outputs[m] << ")");
  return Status::success();
}

Status InstructionChecker::dtype(uint32_t b, DType want, const char *role) {
  INSTR_CHECK(facts.dtypes[b] == want, role << " (buffer " << b << ") must be "
                                            << dtypeLabel(want) << ", got "
                                            << dtypeLabel(facts.dtypes[b]));
  return Status::success();
}

Status InstructionChecker::floating(uint32_t b, const char *role) {
  INSTR_CHECK(facts.dtypes[b] == DType::F32 || facts.dtypes[b] == DType::BF16,
              role << " (buffer " << b << ") must be F32 or BF16, got "
                   << dtypeLabel(facts.dtypes[b]));
  return Status::success();
}

Status InstructionChecker::sameShape(uint32_t b,
                                     const std::vector<int64_t> &want,
                                     const char *role) {
  INSTR_CHECK(shape(b) == want, role << " (buffer " << b << ") has shape "
                                     << shapeString(shape(b)) << ", expected "
                                     << shapeString(want));
  return Status::success();
}

Status InstructionChecker::numel(uint32_t b, int64_t want, const char *role) {
  INSTR_CHECK(shapeNumel(shape(b)) == want,
              role << " (buffer " << b << ") of shape " << shapeString(shape(b))
                   << " has " << shapeNumel(shape(b)) << " elements, expected "
                   << want);
  return Status::success();
}

Status InstructionChecker::scalar(uint32_t b, const char *role) {
  LOOM_RETURN_IF_ERROR(dtype(b, DType::F32, role));
  return numel(b, 1, role);
}

Status InstructionChecker::check() {
  const Opcode op = ins.opcode();
  INSTR_CHECK(!ins.async_collective() || op == Opcode::AllReduce ||
                  op == Opcode::AllGather,
              "only AllReduce and AllGather may be asynchronous, not "
                  << opcodeName(op));
  if (op >= Opcode::Copy && op <= Opcode::Concat)
    return checkMovement();
  if (op <= Opcode::CrossEntropy)
    return checkCompute();
  if (op >= Opcode::EmbeddingGrad && op <= Opcode::ClipCoef)
    return checkTraining();
  if (op >= Opcode::RowMax && op <= Opcode::CrossEntropySumsGrad)
    return checkVocabParallelLoss();
  // LocalSlice is no collective (it communicates nothing) but shares the
  // mesh / axes checks.
  if (isCollective(op) || op == Opcode::LocalSlice)
    return checkCollective();
  if (op == Opcode::Cast)
    return checkCast();
  const char *schemaName = EnumNameOpcode(op);
  INSTR_CHECK(!(schemaName && *schemaName),
              "program uses " << schemaName
                              << ", which this runtime cannot run yet (it "
                                 "executes compute, data movement, gradient, "
                                 "optimizer, collective and cast opcodes "
                                 "0-39)");
  INSTR_CHECK(false, "unknown opcode " << static_cast<unsigned>(op)
                                       << " (not in this runtime's schema); "
                                          "update the runtime or recompile");
  return Status::success();
}

Status InstructionChecker::checkCompute() {
  const Opcode op = ins.opcode();
  switch (op) {
  case Opcode::Embedding: {
    LOOM_RETURN_IF_ERROR(counts(2, 2, 1, 0));
    const uint32_t table = inputs[0], ids = inputs[1], out = outputs[0];
    LOOM_RETURN_IF_ERROR(floating(table, "table"));
    LOOM_RETURN_IF_ERROR(dtype(ids, DType::I32, "ids"));
    LOOM_RETURN_IF_ERROR(floating(out, "result"));
    INSTR_CHECK(shape(table).size() == 2, "table must be [vocab, width], got "
                                              << shapeString(shape(table)));
    // Vocab-parallel: axes splitting the table's rows.
    LOOM_RETURN_IF_ERROR(checkShardAxes());
    std::vector<int64_t> want = shape(ids);
    want.push_back(shape(table)[1]);
    return sameShape(out, want, "result");
  }
  case Opcode::Add: {
    LOOM_RETURN_IF_ERROR(counts(2, 2, 1, 0));
    const uint32_t lhs = inputs[0], rhs = inputs[1], out = outputs[0];
    for (uint32_t b : {lhs, rhs, out})
      LOOM_RETURN_IF_ERROR(floating(b, "operand"));
    const auto &l = shape(lhs), &r = shape(rhs);
    INSTR_CHECK(r.size() <= l.size() &&
                    std::equal(r.begin(), r.end(), l.end() - r.size()),
                "rhs shape " << shapeString(r)
                             << " must equal the trailing dimensions of the "
                                "lhs shape "
                             << shapeString(l));
    return sameShape(out, l, "result");
  }
  case Opcode::Linear: {
    LOOM_RETURN_IF_ERROR(counts(2, 3, 1, 0));
    for (uint32_t b : inputs)
      LOOM_RETURN_IF_ERROR(floating(b, "operand"));
    LOOM_RETURN_IF_ERROR(floating(outputs[0], "result"));
    const auto &x = shape(inputs[0]), &w = shape(inputs[1]);
    INSTR_CHECK(!x.empty(), "input must have rank >= 1");
    INSTR_CHECK(w.size() >= 2,
                "weight must be [in, out...], got " << shapeString(w));
    INSTR_CHECK(x.back() == w[0], "input features "
                                      << x.back()
                                      << " do not match the weight's input "
                                         "dimension "
                                      << w[0] << " (weight is [in, out])");
    const std::vector<int64_t> out(w.begin() + 1, w.end());
    if (inputs.size() == 3)
      LOOM_RETURN_IF_ERROR(sameShape(inputs[2], out, "bias"));
    std::vector<int64_t> want(x.begin(), x.end() - 1);
    want.insert(want.end(), out.begin(), out.end());
    return sameShape(outputs[0], want, "result");
  }
  case Opcode::Matmul: {
    LOOM_RETURN_IF_ERROR(counts(2, 2, 1, 0));
    for (uint32_t b : {inputs[0], inputs[1], outputs[0]})
      LOOM_RETURN_IF_ERROR(floating(b, "operand"));
    const auto &l = shape(inputs[0]), &r = shape(inputs[1]);
    INSTR_CHECK(l.size() >= 2,
                "lhs must be [..., M, K], got " << shapeString(l));
    INSTR_CHECK(r.size() == 2, "rhs must be a matrix, got " << shapeString(r));
    const bool t = ins.transpose_rhs();
    const int64_t k = t ? r[1] : r[0], n = t ? r[0] : r[1];
    INSTR_CHECK(l.back() == k, "contracting dimensions differ: lhs "
                                   << shapeString(l) << " has K = " << l.back()
                                   << ", rhs " << shapeString(r) << " has K = "
                                   << k << (t ? " (rhs transposed)" : ""));
    std::vector<int64_t> want(l.begin(), l.end() - 1);
    want.push_back(n);
    return sameShape(outputs[0], want, "result");
  }
  case Opcode::LayerNorm: {
    LOOM_RETURN_IF_ERROR(counts(3, 3, 1, 2));
    for (uint32_t b : inputs)
      LOOM_RETURN_IF_ERROR(floating(b, "operand"));
    LOOM_RETURN_IF_ERROR(floating(outputs[0], "result"));
    const auto &x = shape(inputs[0]);
    INSTR_CHECK(!x.empty(), "input must have rank >= 1");
    LOOM_RETURN_IF_ERROR(sameShape(inputs[1], {x.back()}, "weight"));
    LOOM_RETURN_IF_ERROR(sameShape(inputs[2], {x.back()}, "bias"));
    LOOM_RETURN_IF_ERROR(sameShape(outputs[0], x, "result"));
    return checkLayerNormStats(x);
  }
  case Opcode::Gelu:
  case Opcode::Softmax: {
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 0));
    LOOM_RETURN_IF_ERROR(floating(inputs[0], "input"));
    LOOM_RETURN_IF_ERROR(floating(outputs[0], "result"));
    if (op == Opcode::Softmax)
      INSTR_CHECK(!shape(inputs[0]).empty(), "input must have rank >= 1");
    return sameShape(outputs[0], shape(inputs[0]), "result");
  }
  case Opcode::Attention: {
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 1));
    LOOM_RETURN_IF_ERROR(floating(inputs[0], "qkv"));
    LOOM_RETURN_IF_ERROR(floating(outputs[0], "result"));
    return checkAttentionShape(shape(inputs[0]), shape(outputs[0]), "result");
  }
  case Opcode::CrossEntropy: {
    LOOM_RETURN_IF_ERROR(counts(2, 2, 1, 1));
    LOOM_RETURN_IF_ERROR(floating(inputs[0], "logits"));
    LOOM_RETURN_IF_ERROR(dtype(inputs[1], DType::I32, "targets"));
    LOOM_RETURN_IF_ERROR(dtype(outputs[0], DType::F32, "result"));
    const auto &l = shape(inputs[0]);
    INSTR_CHECK(l.size() >= 2,
                "logits must be [..., vocab], got " << shapeString(l));
    std::vector<int64_t> rows(l.begin(), l.end() - 1);
    LOOM_RETURN_IF_ERROR(sameShape(inputs[1], rows, "targets"));
    LOOM_RETURN_IF_ERROR(numel(outputs[0], 1, "result (scalar loss)"));
    if (!scratch.empty()) {
      LOOM_RETURN_IF_ERROR(floating(scratch[0], "scratch (losses)"));
      LOOM_RETURN_IF_ERROR(
          numel(scratch[0], shapeNumel(rows), "scratch (per-token losses)"));
    }
    return Status::success();
  }
  default:
    break;
  }
  INSTR_CHECK(false, "unknown opcode " << static_cast<unsigned>(op));
  return Status::success();
}

Status InstructionChecker::checkTraining() {
  const Opcode op = ins.opcode();
  auto allFloat = [&](const std::vector<uint32_t> &v,
                      const char *role) -> Status {
    for (uint32_t b : v)
      LOOM_RETURN_IF_ERROR(floating(b, role));
    return Status::success();
  };
  switch (op) {
  case Opcode::EmbeddingGrad: {
    LOOM_RETURN_IF_ERROR(counts(2, 2, 1, 0));
    const uint32_t dout = inputs[0], ids = inputs[1], out = outputs[0];
    LOOM_RETURN_IF_ERROR(floating(dout, "dout"));
    LOOM_RETURN_IF_ERROR(dtype(ids, DType::I32, "ids"));
    LOOM_RETURN_IF_ERROR(floating(out, "dtable"));
    INSTR_CHECK(shape(out).size() == 2, "dtable must be [vocab, width], got "
                                            << shapeString(shape(out)));
    std::vector<int64_t> want = shape(ids);
    want.push_back(shape(out)[1]);
    return sameShape(dout, want, "dout");
  }
  case Opcode::ReduceLeading: {
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 0));
    LOOM_RETURN_IF_ERROR(allFloat({inputs[0], outputs[0]}, "operand"));
    const auto &x = shape(inputs[0]), &o = shape(outputs[0]);
    INSTR_CHECK(o.size() <= x.size() &&
                    std::equal(o.begin(), o.end(), x.end() - o.size()),
                "result shape " << shapeString(o)
                                << " must equal the trailing dimensions of the "
                                   "input shape "
                                << shapeString(x));
    return Status::success();
  }
  case Opcode::LinearGrad: {
    LOOM_RETURN_IF_ERROR(counts(3, 3, 2, 0, 3));
    LOOM_RETURN_IF_ERROR(allFloat(inputs, "operand"));
    LOOM_RETURN_IF_ERROR(allFloat(outputs, "result"));
    const auto &dy = shape(inputs[0]), &x = shape(inputs[1]),
               &w = shape(inputs[2]);
    INSTR_CHECK(!x.empty(), "input must have rank >= 1");
    INSTR_CHECK(w.size() >= 2,
                "weight must be [in, out...], got " << shapeString(w));
    INSTR_CHECK(x.back() == w[0], "input features "
                                      << x.back()
                                      << " do not match the weight's input "
                                         "dimension "
                                      << w[0] << " (weight is [in, out])");
    const std::vector<int64_t> out(w.begin() + 1, w.end());
    std::vector<int64_t> want(x.begin(), x.end() - 1);
    want.insert(want.end(), out.begin(), out.end());
    LOOM_RETURN_IF_ERROR(sameShape(inputs[0], want, "dout"));
    (void)dy;
    LOOM_RETURN_IF_ERROR(sameShape(outputs[0], x, "dinput"));
    LOOM_RETURN_IF_ERROR(sameShape(outputs[1], w, "dweight"));
    if (outputs.size() == 3)
      LOOM_RETURN_IF_ERROR(sameShape(outputs[2], out, "dbias"));
    return Status::success();
  }
  case Opcode::MatmulGrad: {
    LOOM_RETURN_IF_ERROR(counts(3, 3, 2, 0));
    LOOM_RETURN_IF_ERROR(allFloat(inputs, "operand"));
    LOOM_RETURN_IF_ERROR(allFloat(outputs, "result"));
    const auto &l = shape(inputs[1]), &r = shape(inputs[2]);
    INSTR_CHECK(l.size() >= 2,
                "lhs must be [..., M, K], got " << shapeString(l));
    INSTR_CHECK(r.size() == 2, "rhs must be a matrix, got " << shapeString(r));
    const bool t = ins.transpose_rhs();
    const int64_t k = t ? r[1] : r[0], n = t ? r[0] : r[1];
    INSTR_CHECK(l.back() == k, "contracting dimensions differ: lhs "
                                   << shapeString(l) << " has K = " << l.back()
                                   << ", rhs " << shapeString(r) << " has K = "
                                   << k << (t ? " (rhs transposed)" : ""));
    std::vector<int64_t> want(l.begin(), l.end() - 1);
    want.push_back(n);
    LOOM_RETURN_IF_ERROR(sameShape(inputs[0], want, "dout"));
    LOOM_RETURN_IF_ERROR(sameShape(outputs[0], l, "dlhs"));
    return sameShape(outputs[1], r, "drhs");
  }
  case Opcode::LayerNormGrad: {
    LOOM_RETURN_IF_ERROR(counts(3, 3, 3, 2));
    LOOM_RETURN_IF_ERROR(allFloat(inputs, "operand"));
    LOOM_RETURN_IF_ERROR(allFloat(outputs, "result"));
    const auto &x = shape(inputs[1]);
    INSTR_CHECK(!x.empty(), "input must have rank >= 1");
    LOOM_RETURN_IF_ERROR(sameShape(inputs[0], x, "dout"));
    LOOM_RETURN_IF_ERROR(sameShape(inputs[2], {x.back()}, "weight"));
    LOOM_RETURN_IF_ERROR(sameShape(outputs[0], x, "dinput"));
    LOOM_RETURN_IF_ERROR(sameShape(outputs[1], {x.back()}, "dweight"));
    LOOM_RETURN_IF_ERROR(sameShape(outputs[2], {x.back()}, "dbias"));
    return checkLayerNormStats(x);
  }
  case Opcode::GeluGrad:
  case Opcode::SoftmaxGrad: {
    LOOM_RETURN_IF_ERROR(counts(2, 2, 1, 0));
    LOOM_RETURN_IF_ERROR(allFloat(inputs, "operand"));
    LOOM_RETURN_IF_ERROR(floating(outputs[0], "dinput"));
    const auto &x = shape(inputs[1]);
    if (op == Opcode::SoftmaxGrad)
      INSTR_CHECK(!x.empty(), "result must have rank >= 1");
    LOOM_RETURN_IF_ERROR(sameShape(inputs[0], x, "dout"));
    return sameShape(outputs[0], x, "dinput");
  }
  case Opcode::AttentionGrad: {
    LOOM_RETURN_IF_ERROR(counts(2, 2, 1, 1));
    LOOM_RETURN_IF_ERROR(allFloat(inputs, "operand"));
    LOOM_RETURN_IF_ERROR(floating(outputs[0], "dqkv"));
    LOOM_RETURN_IF_ERROR(
        checkAttentionShape(shape(inputs[1]), shape(inputs[0]), "dout"));
    return sameShape(outputs[0], shape(inputs[1]), "dqkv");
  }
  case Opcode::CrossEntropyGrad: {
    LOOM_RETURN_IF_ERROR(counts(3, 3, 1, 0));
    LOOM_RETURN_IF_ERROR(scalar(inputs[0], "dloss (scalar)"));
    LOOM_RETURN_IF_ERROR(floating(inputs[1], "logits"));
    LOOM_RETURN_IF_ERROR(dtype(inputs[2], DType::I32, "targets"));
    LOOM_RETURN_IF_ERROR(floating(outputs[0], "dlogits"));
    const auto &l = shape(inputs[1]);
    INSTR_CHECK(l.size() >= 2,
                "logits must be [..., vocab], got " << shapeString(l));
    std::vector<int64_t> rows(l.begin(), l.end() - 1);
    LOOM_RETURN_IF_ERROR(sameShape(inputs[2], rows, "targets"));
    return sameShape(outputs[0], l, "dlogits");
  }
  case Opcode::SliceGrad: {
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 0));
    const uint32_t in = inputs[0], out = outputs[0];
    INSTR_CHECK(
        facts.dtypes[in] == facts.dtypes[out],
        "dout is " << dtypeLabel(facts.dtypes[in]) << " but the result is "
                   << dtypeLabel(facts.dtypes[out]) << " (no conversion)");
    const auto &d = shape(in), &o = shape(out);
    const int64_t dim = ins.dim(), offset = ins.offset();
    INSTR_CHECK(d.size() == o.size(), "result rank " << o.size()
                                                     << " differs from dout "
                                                        "rank "
                                                     << d.size());
    INSTR_CHECK(dim >= 0 && dim < static_cast<int64_t>(o.size()),
                "dim " << dim << " is out of range for rank " << o.size());
    INSTR_CHECK(offset >= 0 && offset <= o[dim] - d[dim],
                "dout of " << d[dim] << " at offset " << offset
                           << " of dimension " << dim
                           << " is out of bounds for size " << o[dim]);
    for (size_t k = 0; k < o.size(); ++k)
      INSTR_CHECK(static_cast<int64_t>(k) == dim || d[k] == o[k],
                  "result dimension "
                      << k << " is " << o[k] << " but only dimension " << dim
                      << " may differ from dout " << shapeString(d));
    return Status::success();
  }
  case Opcode::Fill: {
    LOOM_RETURN_IF_ERROR(counts(0, 0, 1, 0));
    const DType t = facts.dtypes[outputs[0]];
    const double v = ins.value();
    INSTR_CHECK(t == DType::F32 || t == DType::BF16 || t == DType::I32,
                "result (buffer " << outputs[0]
                                  << ") must be F32, BF16 or I32, got "
                                  << dtypeLabel(t));
    INSTR_CHECK(t != DType::I32 ||
                    (v == std::floor(v) && v >= INT32_MIN && v <= INT32_MAX),
                "value " << v << " is not an int32 (the result is I32)");
    return Status::success();
  }
  case Opcode::SumSquares: {
    LOOM_RETURN_IF_ERROR(counts(1, SIZE_MAX, 1, 0));
    LOOM_RETURN_IF_ERROR(allFloat(inputs, "gradient"));
    return scalar(outputs[0], "sum of squares (scalar)");
  }
  case Opcode::ClipCoef: {
    LOOM_RETURN_IF_ERROR(counts(1, 1, 2, 0));
    LOOM_RETURN_IF_ERROR(scalar(inputs[0], "sumsq (scalar)"));
    LOOM_RETURN_IF_ERROR(scalar(outputs[0], "norm (scalar)"));
    LOOM_RETURN_IF_ERROR(scalar(outputs[1], "coef (scalar)"));
    INSTR_CHECK(std::isfinite(ins.max_norm()),
                "max_norm " << ins.max_norm() << " is not finite");
    return Status::success();
  }
  case Opcode::AdamW: {
    LOOM_RETURN_IF_ERROR(counts(7, 7, 3, 0));
    const uint32_t p = inputs[0], g = inputs[1], m = inputs[2], v = inputs[3];
    LOOM_RETURN_IF_ERROR(allFloat({p, g, m, v}, "operand"));
    LOOM_RETURN_IF_ERROR(sameShape(g, shape(p), "grad"));
    LOOM_RETURN_IF_ERROR(sameShape(m, shape(p), "m"));
    LOOM_RETURN_IF_ERROR(sameShape(v, shape(p), "v"));
    LOOM_RETURN_IF_ERROR(scalar(inputs[4], "lr (scalar)"));
    LOOM_RETURN_IF_ERROR(scalar(inputs[5], "step (scalar)"));
    LOOM_RETURN_IF_ERROR(scalar(inputs[6], "coef (scalar)"));
    // Outputs are the updated param, m and v: usually the input buffers
    // themselves (in place); ZeRO writes the updated parameter shard to a
    // fresh buffer before all-gathering it.
    LOOM_RETURN_IF_ERROR(sameShape(outputs[0], shape(p), "updated param"));
    LOOM_RETURN_IF_ERROR(sameShape(outputs[1], shape(p), "updated m"));
    LOOM_RETURN_IF_ERROR(sameShape(outputs[2], shape(p), "updated v"));
    LOOM_RETURN_IF_ERROR(
        allFloat({outputs[0], outputs[1], outputs[2]}, "output"));
    const uint32_t state[] = {p, g, m, v};
    const char *names[] = {"param", "grad", "m", "v"};
    for (int a = 0; a < 4; ++a)
      for (int b = a + 1; b < 4; ++b)
        INSTR_CHECK(!overlaps(state[a], state[b]),
                    names[a] << " (buffer " << state[a] << ") overlaps "
                             << names[b] << " (buffer " << state[b] << ")");
    for (const auto &[name, value] :
         {std::pair<const char *, double>{"beta1", ins.beta1()},
          {"beta2", ins.beta2()}})
      INSTR_CHECK(value >= 0.0 && value < 1.0,
                  name << " must be in [0, 1), got " << value);
    INSTR_CHECK(ins.adam_eps() > 0.0 && std::isfinite(ins.adam_eps()),
                "adam_eps must be positive, got " << ins.adam_eps());
    INSTR_CHECK(ins.weight_decay() >= 0.0 && std::isfinite(ins.weight_decay()),
                "weight_decay must be >= 0, got " << ins.weight_decay());
    return Status::success();
  }
  default:
    break;
  }
  INSTR_CHECK(false, "unknown opcode " << static_cast<unsigned>(op));
  return Status::success();
}

Status InstructionChecker::checkAttentionShape(const std::vector<int64_t> &q,
                                               const std::vector<int64_t> &out,
                                               const char *role) {
  INSTR_CHECK((q.size() == 3 && q[2] % 3 == 0) || (q.size() == 4 && q[2] == 3),
              "qkv must be [batch, seq, 3 * channels] or [batch, seq, 3, "
              "channels], got "
                  << shapeString(q));
  const int64_t C = q.size() == 4 ? q[3] : q[2] / 3, NH = ins.num_heads();
  INSTR_CHECK(NH > 0, "num_heads must be positive, got " << NH);
  INSTR_CHECK(C % NH == 0,
              "channels " << C << " are not divisible by num_heads " << NH);
  INSTR_CHECK(out == std::vector<int64_t>({q[0], q[1], C}),
              role << " has shape " << shapeString(out) << ", expected "
                   << shapeString({q[0], q[1], C}));
  // The probabilities [B, NH, T, T] live in scratch or a runtime
  // temporary; either way their count must be representable.
  int64_t probs = 0;
  INSTR_CHECK(!__builtin_mul_overflow(q[0] * NH, q[1], &probs) &&
                  !__builtin_mul_overflow(probs, q[1], &probs) &&
                  probs <= std::numeric_limits<int64_t>::max() / 8,
              "attention probabilities B*NH*T*T = " << q[0] << "*" << NH << "*"
                                                    << q[1] << "*" << q[1]
                                                    << " overflow");
  if (!scratch.empty()) {
    LOOM_RETURN_IF_ERROR(floating(scratch[0], "scratch (att)"));
    // B*NH*T*T fits: NH <= C and the qkv buffer is in the arena, but T*T
    // may not; compare by division.
    const int64_t s = shapeNumel(shape(scratch[0]));
    const int64_t bnh = q[0] * NH;
    INSTR_CHECK(s % bnh == 0 && s / bnh % q[1] == 0 && s / bnh / q[1] == q[1],
                "scratch (att) has "
                    << s << " elements, expected B*NH*T*T = " << q[0] << "*"
                    << NH << "*" << q[1] << "*" << q[1]);
  }
  return Status::success();
}

Status InstructionChecker::checkShardAxes() {
  const std::vector<uint32_t> axes = toVector(ins.axes());
  INSTR_CHECK(axes.empty() || !facts.mesh.empty(),
              "reads a shard split over mesh axes, but Program.mesh is empty "
              "(a single-rank program)");
  for (size_t k = 0; k < axes.size(); ++k) {
    INSTR_CHECK(axes[k] < facts.mesh.size(),
                "axis " << axes[k] << " is out of range (the mesh has "
                        << facts.mesh.size() << " axes)");
    for (size_t m = 0; m < k; ++m)
      INSTR_CHECK(axes[m] != axes[k], "axis " << axes[k] << " appears twice");
  }
  return Status::success();
}

Status InstructionChecker::checkVocabParallelLoss() {
  const Opcode op = ins.opcode();
  LOOM_RETURN_IF_ERROR(checkShardAxes());
  auto allFloat = [&](const std::vector<uint32_t> &v,
                      const char *role) -> Status {
    for (uint32_t b : v)
      LOOM_RETURN_IF_ERROR(floating(b, role));
    return Status::success();
  };
  // Per-token shapes: the logits without their last dimension.
  auto tokensOf = [&](uint32_t logits, std::vector<int64_t> &tokens) -> Status {
    const auto &l = shape(logits);
    INSTR_CHECK(l.size() >= 2,
                "logits must be [..., vocab], got " << shapeString(l));
    tokens.assign(l.begin(), l.end() - 1);
    return Status::success();
  };
  std::vector<int64_t> tokens;
  switch (op) {
  case Opcode::RowMax: {
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 0));
    LOOM_RETURN_IF_ERROR(allFloat({inputs[0], outputs[0]}, "operand"));
    const auto &x = shape(inputs[0]);
    INSTR_CHECK(!x.empty(), "input must have rank >= 1");
    return sameShape(outputs[0], std::vector<int64_t>(x.begin(), x.end() - 1),
                     "result");
  }
  case Opcode::CrossEntropySums:
    LOOM_RETURN_IF_ERROR(counts(3, 3, 2, 0));
    LOOM_RETURN_IF_ERROR(
        allFloat({inputs[0], inputs[1], outputs[0], outputs[1]}, "operand"));
    LOOM_RETURN_IF_ERROR(dtype(inputs[2], DType::I32, "targets"));
    LOOM_RETURN_IF_ERROR(tokensOf(inputs[0], tokens));
    LOOM_RETURN_IF_ERROR(sameShape(inputs[1], tokens, "row_max"));
    LOOM_RETURN_IF_ERROR(sameShape(inputs[2], tokens, "targets"));
    LOOM_RETURN_IF_ERROR(sameShape(outputs[0], tokens, "sum_exp"));
    return sameShape(outputs[1], tokens, "target_logit");
  case Opcode::CrossEntropyFromSums:
    LOOM_RETURN_IF_ERROR(counts(3, 3, 1, 0));
    LOOM_RETURN_IF_ERROR(
        allFloat({inputs[0], inputs[1], inputs[2]}, "operand"));
    LOOM_RETURN_IF_ERROR(sameShape(inputs[1], shape(inputs[0]), "sum_exp"));
    LOOM_RETURN_IF_ERROR(sameShape(inputs[2], shape(inputs[0]), "target_logit"));
    INSTR_CHECK(ins.value() >= 0.0 && std::isfinite(ins.value()),
                "value (global token count) must be >= 0, got " << ins.value());
    return scalar(outputs[0], "result (scalar loss)");
  case Opcode::CrossEntropySumsGrad:
    LOOM_RETURN_IF_ERROR(counts(5, 5, 1, 0));
    LOOM_RETURN_IF_ERROR(scalar(inputs[0], "dloss (scalar)"));
    LOOM_RETURN_IF_ERROR(
        allFloat({inputs[1], inputs[2], inputs[3], outputs[0]}, "operand"));
    LOOM_RETURN_IF_ERROR(dtype(inputs[4], DType::I32, "targets"));
    LOOM_RETURN_IF_ERROR(tokensOf(inputs[1], tokens));
    LOOM_RETURN_IF_ERROR(sameShape(inputs[2], tokens, "row_max"));
    LOOM_RETURN_IF_ERROR(sameShape(inputs[3], tokens, "sum_exp"));
    LOOM_RETURN_IF_ERROR(sameShape(inputs[4], tokens, "targets"));
    INSTR_CHECK(ins.value() >= 0.0 && std::isfinite(ins.value()),
                "value (global token count) must be >= 0, got " << ins.value());
    return sameShape(outputs[0], shape(inputs[1]), "dlogits");
  default:
    break;
  }
  return Status::success();
}

Status InstructionChecker::checkMovement() {
  const Opcode op = ins.opcode();
  LOOM_RETURN_IF_ERROR(counts(1, op == Opcode::Concat ? SIZE_MAX : 1, 1, 0));
  // Data movement works on any dtype, but does not convert.
  const uint32_t out = outputs[0];
  for (uint32_t b : inputs)
    INSTR_CHECK(facts.dtypes[b] == facts.dtypes[out],
                "input buffer " << b << " is " << dtypeLabel(facts.dtypes[b])
                                << " but the result is "
                                << dtypeLabel(facts.dtypes[out])
                                << " (no conversion)");
  const auto &in = shape(inputs[0]), &o = shape(out);
  switch (op) {
  case Opcode::Copy:
    return numel(out, shapeNumel(in), "result");
  case Opcode::Transpose: {
    std::vector<int64_t> perm = toVector(ins.permutation());
    INSTR_CHECK(perm.size() == in.size(),
                "permutation has " << perm.size()
                                   << " entries but the input has rank "
                                   << in.size());
    std::vector<bool> used(in.size(), false);
    std::vector<int64_t> want;
    for (int64_t p : perm) {
      INSTR_CHECK(p >= 0 && p < static_cast<int64_t>(in.size()) && !used[p],
                  "permutation " << shapeString(perm)
                                 << " is not a permutation of 0.."
                                 << static_cast<int64_t>(in.size()) - 1);
      used[p] = true;
      want.push_back(in[p]);
    }
    return sameShape(out, want, "result");
  }
  case Opcode::Slice: {
    const int64_t dim = ins.dim(), offset = ins.offset();
    INSTR_CHECK(in.size() == o.size(),
                "result rank " << o.size() << " differs from input rank "
                               << in.size());
    INSTR_CHECK(dim >= 0 && dim < static_cast<int64_t>(in.size()),
                "dim " << dim << " is out of range for rank " << in.size());
    INSTR_CHECK(offset >= 0 && offset <= in[dim] - o[dim],
                "slice of " << o[dim] << " at offset " << offset
                            << " of dimension " << dim
                            << " is out of bounds for size " << in[dim]);
    for (size_t d = 0; d < in.size(); ++d)
      INSTR_CHECK(static_cast<int64_t>(d) == dim || in[d] == o[d],
                  "result dimension "
                      << d << " is " << o[d] << " but only dimension " << dim
                      << " may change (input " << shapeString(in) << ")");
    return Status::success();
  }
  case Opcode::Concat: {
    const int64_t dim = ins.dim();
    INSTR_CHECK(dim >= 0 && dim < static_cast<int64_t>(o.size()),
                "dim " << dim << " is out of range for rank " << o.size());
    int64_t total = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto &s = shape(inputs[k]);
      INSTR_CHECK(s.size() == o.size(), "input #" << k << " has rank "
                                                  << s.size()
                                                  << " but the result has "
                                                     "rank "
                                                  << o.size());
      for (size_t d = 0; d < s.size(); ++d)
        INSTR_CHECK(static_cast<int64_t>(d) == dim || s[d] == o[d],
                    "input #" << k << " " << shapeString(s)
                              << " differs from the result " << shapeString(o)
                              << " in dimension " << d);
      total += s[dim]; // each <= arena size: no overflow
    }
    INSTR_CHECK(total == o[dim], "inputs add up to "
                                     << total << " along dim " << dim
                                     << " but the result has " << o[dim]);
    return Status::success();
  }
  default:
    break;
  }
  return Status::success();
}

Status InstructionChecker::checkCollective() {
  const Opcode op = ins.opcode();
  INSTR_CHECK(
      !facts.mesh.empty(),
      (op == Opcode::LocalSlice ? "LocalSlice needs" : "collectives need")
          << " a device mesh, but Program.mesh is empty "
             "(a single-rank program)");
  const std::vector<uint32_t> axes = toVector(ins.axes());
  INSTR_CHECK(!axes.empty(), opcodeName(op) << " names no mesh axes");
  int64_t n = 1;
  for (size_t k = 0; k < axes.size(); ++k) {
    INSTR_CHECK(axes[k] < facts.mesh.size(),
                "axis " << axes[k] << " is out of range (the mesh has "
                        << facts.mesh.size() << " axes)");
    for (size_t m = 0; m < k; ++m)
      INSTR_CHECK(axes[m] != axes[k], "axis " << axes[k] << " appears twice");
    n *= facts.mesh[axes[k]];
  }
  const Reduction red = ins.reduction();
  auto checkReduction = [&](uint32_t b) -> Status {
    const char *rn = EnumNameReduction(red);
    INSTR_CHECK(rn && *rn,
                "unknown reduction " << static_cast<int>(red));
    INSTR_CHECK(red != Reduction::Avg || facts.dtypes[b] == DType::F32 ||
                    facts.dtypes[b] == DType::BF16,
                "Avg reduction needs F32 or BF16 data, got "
                    << dtypeLabel(facts.dtypes[b]));
    return Status::success();
  };
  auto checkDim = [&](int64_t dim, const std::vector<int64_t> &s,
                      const char *what) -> Status {
    INSTR_CHECK(dim >= 0 && dim < static_cast<int64_t>(s.size()),
                what << " " << dim << " is out of range for rank "
                     << s.size());
    return Status::success();
  };
  // In and out may be the same bytes (in place) or disjoint, never partly
  // overlapping.
  auto inPlaceOrDisjoint = [&](uint32_t a, uint32_t b) -> Status {
    INSTR_CHECK(!overlaps(a, b) || (facts.offsets[a] == facts.offsets[b] &&
                                    facts.bytes[a] == facts.bytes[b]),
                "input buffer " << a << " partly overlaps output buffer "
                                << b);
    return Status::success();
  };
  switch (op) {
  case Opcode::AllReduce: {
    // One value, or a bucket: k inputs packed into scratch[0], k outputs.
    INSTR_CHECK(!inputs.empty() && inputs.size() == outputs.size(),
                "AllReduce needs one output per input, got "
                    << inputs.size() << " inputs and " << outputs.size()
                    << " outputs");
    const size_t k = inputs.size();
    LOOM_RETURN_IF_ERROR(counts(k, k, k, k > 1 ? 1 : 0));
    int64_t packed = 0;
    for (size_t j = 0; j < k; ++j) {
      const uint32_t in = inputs[j], out = outputs[j];
      LOOM_RETURN_IF_ERROR(dtype(in, facts.dtypes[inputs[0]], "bucket input"));
      LOOM_RETURN_IF_ERROR(dtype(out, facts.dtypes[in], "result"));
      LOOM_RETURN_IF_ERROR(sameShape(out, shape(in), "result"));
      LOOM_RETURN_IF_ERROR(checkReduction(in));
      LOOM_RETURN_IF_ERROR(inPlaceOrDisjoint(in, out));
      packed += facts.bytes[in];
    }
    if (k > 1) {
      INSTR_CHECK(scratch.size() == 1,
                  "an AllReduce of " << k
                                     << " values needs one scratch buffer to "
                                        "pack them into, got "
                                     << scratch.size());
      INSTR_CHECK(static_cast<int64_t>(facts.bytes[scratch[0]]) >= packed,
                  "the AllReduce scratch buffer has "
                      << facts.bytes[scratch[0]] << " bytes, but its " << k
                      << " values need " << packed);
      for (size_t j = 0; j < k; ++j)
        INSTR_CHECK(!overlaps(scratch[0], outputs[j]) &&
                        !overlaps(scratch[0], inputs[j]),
                    "the AllReduce scratch buffer overlaps value #" << j);
    }
    if (ins.members() && ins.members()->size() > 0) {
      // Among some coordinates of one axis (a pipeline's shared parameter).
      const std::vector<int64_t> members = toVector(ins.members());
      INSTR_CHECK(axes.size() == 1 && k == 1 && !ins.async_collective(),
                  "an AllReduce among members reduces one value over one "
                  "axis, synchronously");
      INSTR_CHECK(facts.dtypes[inputs[0]] == DType::F32 ||
                      facts.dtypes[inputs[0]] == DType::BF16,
                  "an AllReduce among members needs F32 or BF16 data, got "
                      << dtypeLabel(facts.dtypes[inputs[0]]));
      INSTR_CHECK(members.size() >= 2, "an AllReduce among members needs at "
                                       "least two members");
      for (size_t m = 0; m < members.size(); ++m)
        INSTR_CHECK(members[m] >= 0 && members[m] < n &&
                        (m == 0 || members[m] > members[m - 1]),
                    "members must be increasing coordinates below the axis "
                    "size "
                        << n << ", got " << members[m]);
    }
    return Status::success();
  }
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
  case Opcode::AllToAll: {
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 0));
    const uint32_t in = inputs[0], out = outputs[0];
    LOOM_RETURN_IF_ERROR(dtype(out, facts.dtypes[in], "result"));
    INSTR_CHECK(!overlaps(in, out), "output buffer "
                                        << out << " overlaps input buffer "
                                        << in);
    const std::vector<int64_t> &s = shape(in);
    const int64_t dim = ins.dim();
    LOOM_RETURN_IF_ERROR(checkDim(dim, s, "dim"));
    std::vector<int64_t> want = s;
    if (op == Opcode::AllGather) {
      want[dim] = s[dim] * n;
    } else {
      INSTR_CHECK(s[dim] % n == 0, "input dimension " << dim << " of "
                                                      << shapeString(s)
                                                      << " is not divisible "
                                                         "by the group size "
                                                      << n);
      want[dim] = s[dim] / n;
      if (op == Opcode::ReduceScatter)
        LOOM_RETURN_IF_ERROR(checkReduction(in));
      if (op == Opcode::AllToAll) {
        const int64_t dim2 = ins.dim2();
        LOOM_RETURN_IF_ERROR(checkDim(dim2, s, "dim2"));
        want[dim2] *= n;
      }
    }
    return sameShape(out, want, "result");
  }
  case Opcode::LocalSlice: {
    // Any dtype (a copy of a block); out may share bytes with x (the
    // executor stages it).
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 0));
    const uint32_t in = inputs[0], out = outputs[0];
    LOOM_RETURN_IF_ERROR(dtype(out, facts.dtypes[in], "result"));
    const std::vector<int64_t> &s = shape(in);
    const int64_t dim = ins.dim();
    LOOM_RETURN_IF_ERROR(checkDim(dim, s, "dim"));
    INSTR_CHECK(s[dim] % n == 0, "input dimension " << dim << " of "
                                                    << shapeString(s)
                                                    << " is not divisible by "
                                                       "the group size "
                                                    << n);
    std::vector<int64_t> want = s;
    want[dim] = s[dim] / n;
    return sameShape(out, want, "result");
  }
  case Opcode::Send:
  case Opcode::Recv: {
    if (op == Opcode::Send)
      LOOM_RETURN_IF_ERROR(counts(1, 1, 0, 0));
    else
      LOOM_RETURN_IF_ERROR(counts(0, 0, 1, 0));
    INSTR_CHECK(axes.size() == 1, opcodeName(op)
                                      << " runs along exactly one mesh axis, "
                                         "got "
                                      << axes.size());
    INSTR_CHECK(ins.peer() >= 0 && ins.peer() < n,
                "peer " << ins.peer() << " is out of range for axis "
                        << axes[0] << " of size " << n);
    INSTR_CHECK(ins.tag() >= 0 && ins.tag() <= 32767,
                "tag " << ins.tag() << " must be in [0, 32767]");
    return Status::success();
  }
  default:
    break;
  }
  return Status::success();
}

Status InstructionChecker::checkCast() {
  LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 0));
  const uint32_t in = inputs[0], out = outputs[0];
  const DType from = facts.dtypes[in], to = facts.dtypes[out];
  INSTR_CHECK((from == DType::F32 && to == DType::BF16) ||
                  (from == DType::BF16 && to == DType::F32),
              "Cast converts F32 to BF16 or BF16 to F32, got "
                  << dtypeLabel(from) << " (buffer " << in << ") to "
                  << dtypeLabel(to) << " (buffer " << out << ")"
                  << (from == to ? "; a same-dtype move is a Copy" : ""));
  return sameShape(out, shape(in), "result");
}

#undef INSTR_CHECK

//===----------------------------------------------------------------------===//
// Params, special buffers, stages
//===----------------------------------------------------------------------===//

Status checkParams(const Stage &stage, const StageFacts &facts, bool training) {
  const uint32_t si = stage.index();
  const auto *params = stage.params();
  if (!params)
    return Status::success();
  std::set<std::string> names;
  for (uint32_t p = 0; p < params->size(); ++p) {
    const Param *param = params->Get(p);
    const std::string name = nameOf(param->name());
    const std::string label = "stage " + std::to_string(si) + ", param #" +
                              std::to_string(p) + " '" + name + "'";
    LOOM_CHECK(!name.empty(), label << ": has no name");
    LOOM_CHECK(names.insert(name).second,
               label << ": the name appears twice in the parameter table");
    const uint32_t b = param->buffer();
    LOOM_CHECK(b < facts.shapes.size(),
               label << ": buffer " << b << " is out of range (the stage has "
                     << facts.shapes.size() << " buffers)");
    LOOM_CHECK(facts.dtypes[b] == DType::F32 || facts.dtypes[b] == DType::BF16,
               label << ": buffer " << b << " must be F32 or BF16, got "
                     << dtypeLabel(facts.dtypes[b]));
    const std::vector<int64_t> &local = facts.shapes[b];
    const std::vector<int64_t> global = toVector(param->global_shape());
    // A sharded parameter's offset follows from its sharding (checked by
    // checkSharding); slice_offset is ignored then.
    const bool sharded = param->sharding() && param->sharding()->size() > 0;
    std::vector<int64_t> offset = toVector(param->slice_offset());
    if (sharded)
      offset.assign(local.size(), 0);
    LOOM_CHECK(global.size() == local.size(),
               label << ": global shape " << shapeString(global) << " has rank "
                     << global.size() << " but the local buffer "
                     << shapeString(local) << " has rank " << local.size());
    LOOM_CHECK(offset.size() == local.size(),
               label << ": slice_offset " << shapeString(offset) << " has "
                     << offset.size() << " entries, expected " << local.size());
    int64_t gnumel = 1;
    for (size_t d = 0; d < global.size(); ++d) {
      LOOM_CHECK(global[d] > 0 &&
                     gnumel <= std::numeric_limits<int64_t>::max() / global[d],
                 label << ": global shape " << shapeString(global)
                       << " is invalid (dimensions must be positive)");
      gnumel *= global[d];
      LOOM_CHECK(offset[d] >= 0 && (sharded ? local[d] <= global[d]
                                            : offset[d] <= global[d] - local[d]),
                 label << ": slice at offset " << shapeString(offset)
                       << " of size " << shapeString(local)
                       << " leaves the global shape " << shapeString(global)
                       << " in dimension " << d);
    }
    // A checkpoint shape regroups the same elements.
    const std::vector<int64_t> checkpoint =
        toVector(param->checkpoint_shape());
    if (!checkpoint.empty()) {
      int64_t cnumel = 1;
      for (int64_t d : checkpoint) {
        LOOM_CHECK(d > 0 && cnumel <= std::numeric_limits<int64_t>::max() / d,
                   label << ": checkpoint shape " << shapeString(checkpoint)
                         << " is invalid (dimensions must be positive)");
        cnumel *= d;
      }
      LOOM_CHECK(cnumel == gnumel,
                 label << ": checkpoint shape " << shapeString(checkpoint)
                       << " has " << cnumel << " elements but the global shape "
                       << shapeString(global) << " has " << gnumel);
    }
    // A padded parameter: its real rows, then padding (dimension 0 only).
    const int64_t unpadded = param->unpadded_rows();
    LOOM_CHECK(unpadded >= 0 && unpadded <= (global.empty() ? 0 : global[0]),
               label << ": unpadded_rows = " << unpadded
                     << " must be in [0, " << (global.empty() ? 0 : global[0])
                     << "] (the real rows of dimension 0 of the global shape "
                     << shapeString(global) << "; 0: not padded)");
    LOOM_CHECK(unpadded == 0 || checkpoint.empty(),
               label << ": has both unpadded_rows and checkpoint_shape; a "
                        "padded parameter is saved with its real rows, not "
                        "regrouped");
    // ZeRO: grad_sharding / moment_sharding (when present) give the
    // gradient / moments the global shape divided per dimension by the
    // product of the sizes of that dimension's axes; else they have the
    // parameter's local shape.
    auto extraShape =
        [&](const flatbuffers::Vector<flatbuffers::Offset<DimSharding>> *sh,
            const char *field, std::vector<int64_t> &want) -> Status {
      want = local;
      if (!sh || sh->size() == 0)
        return Status::success();
      LOOM_CHECK(!facts.mesh.empty(),
                 label << ": has " << field << " but Program.mesh is empty");
      LOOM_CHECK(sh->size() == global.size(),
                 label << ": " << field << " has " << sh->size()
                       << " entries, expected one per dimension ("
                       << global.size() << ")");
      std::set<uint32_t> used;
      for (uint32_t d = 0; d < sh->size(); ++d) {
        const DimSharding *ds = sh->Get(d);
        int64_t blocks = 1;
        for (uint32_t a : toVector(ds ? ds->axes() : nullptr)) {
          LOOM_CHECK(a < facts.mesh.size(),
                     label << ": " << field << " of dimension " << d
                           << " names axis " << a << ", but the mesh has "
                           << facts.mesh.size() << " axes");
          LOOM_CHECK(used.insert(a).second,
                     label << ": " << field << ": mesh axis " << a
                           << " shards more than one dimension (or twice)");
          blocks *= facts.mesh[a];
        }
        LOOM_CHECK(global[d] % blocks == 0,
                   label << ": " << field << ": dimension " << d
                         << " of the global shape " << shapeString(global)
                         << " is not divisible into " << blocks << " blocks");
        want[d] = global[d] / blocks;
      }
      return Status::success();
    };
    std::vector<int64_t> gradShape, momentShape;
    LOOM_RETURN_IF_ERROR(
        extraShape(param->grad_sharding(), "grad_sharding", gradShape));
    LOOM_RETURN_IF_ERROR(
        extraShape(param->moment_sharding(), "moment_sharding", momentShape));
    // Training buffers: the gradient accumulator and the AdamW moments have
    // those shapes and share no bytes with the parameter or each other (the
    // update reads the gradient while writing the rest). The moments and a
    // mixed-precision master are F32; the gradient F32 or BF16 (bf16
    // gradients, or fp32 accumulation under bf16 weights).
    struct Extra {
      int32_t index;
      const char *what;
      const std::vector<int64_t> *shape;
      const char *whose;
      bool bf16Allowed;
    };
    const bool gradSharded =
        param->grad_sharding() && param->grad_sharding()->size() > 0;
    const bool momentSharded =
        param->moment_sharding() && param->moment_sharding()->size() > 0;
    const char *momentWhose =
        momentSharded ? "moment_sharding's block" : "the parameter's";
    const Extra extra[] = {
        {param->grad_buffer(), "grad_buffer", &gradShape,
         gradSharded ? "grad_sharding's block" : "the parameter's", true},
        {param->m_buffer(), "m_buffer", &momentShape, momentWhose, false},
        {param->v_buffer(), "v_buffer", &momentShape, momentWhose, false},
        {param->master_buffer(), "master_buffer", &momentShape, momentWhose,
         false}};
    std::vector<uint32_t> owned = {b};
    for (const auto &[index, what, want, whose, bf16Allowed] : extra) {
      if (index == -1)
        continue;
      LOOM_CHECK(index >= 0 && static_cast<size_t>(index) < facts.shapes.size(),
                 label << ": " << what << " " << index
                       << " is out of range (the stage has "
                       << facts.shapes.size() << " buffers; -1 means none)");
      const DType t = facts.dtypes[index];
      LOOM_CHECK((t == DType::F32 || (bf16Allowed && t == DType::BF16)) &&
                     facts.shapes[index] == *want,
                 label << ": " << what << " " << index << " is "
                       << shapeString(facts.shapes[index]) << " "
                       << dtypeLabel(t) << ", expected " << whose << " "
                       << shapeString(*want)
                       << (bf16Allowed ? " F32 or BF16" : " F32"));
      for (uint32_t other : owned)
        LOOM_CHECK(facts.offsets[index] >=
                           facts.offsets[other] + facts.bytes[other] ||
                       facts.offsets[other] >=
                           facts.offsets[index] + facts.bytes[index],
                   label << ": " << what << " " << index << " overlaps buffer "
                         << other << " of the same parameter");
      owned.push_back(static_cast<uint32_t>(index));
    }
    if (training)
      LOOM_CHECK(param->grad_buffer() >= 0 && param->m_buffer() >= 0 &&
                     param->v_buffer() >= 0,
                 label << ": a training program (update_instructions is not "
                          "empty) needs grad_buffer, m_buffer and v_buffer "
                          "for every parameter");
    // Mixed precision: the master holds the fp32 weights of a bf16
    // parameter. A bf16 parameter a training program updates without one
    // would lose every update smaller than bf16's spacing.
    LOOM_CHECK(param->master_buffer() < 0 || facts.dtypes[b] == DType::BF16,
               label << ": has master_buffer " << param->master_buffer()
                     << " but its buffer " << b << " is "
                     << dtypeLabel(facts.dtypes[b])
                     << "; fp32 master weights belong to a BF16 parameter");
    LOOM_CHECK(!training || facts.dtypes[b] != DType::BF16 ||
                   param->master_buffer() >= 0,
               label << ": buffer " << b
                     << " is BF16 but the training program gives it no "
                        "master_buffer (the fp32 master weights AdamW "
                        "updates); compile with --precision bf16, which "
                        "adds them");
    const auto kind = param->init();
    LOOM_CHECK(kind == InitKind::Normal || kind == InitKind::Zeros ||
                   kind == InitKind::Ones,
               label << ": unknown init kind " << static_cast<int>(kind));
    const double std = param->init_std();
    LOOM_CHECK(kind != InitKind::Normal || (std >= 0.0 && std < 1e6),
               label << ": init_std " << std << " is not a valid standard "
                     << "deviation");
  }
  return Status::success();
}

/// Param.sharding: one entry per dimension, axes in range and distinct over
/// the whole parameter, and local size x blocks = global size.
Status checkSharding(const Stage &stage, const StageFacts &facts) {
  const auto *params = stage.params();
  if (!params)
    return Status::success();
  for (uint32_t p = 0; p < params->size(); ++p) {
    const Param *param = params->Get(p);
    const auto *sharding = param->sharding();
    if (!sharding || sharding->size() == 0)
      continue;
    const std::string label = "stage " + std::to_string(stage.index()) +
                              ", param #" + std::to_string(p) + " '" +
                              nameOf(param->name()) + "'";
    LOOM_CHECK(!facts.mesh.empty(),
               label << ": is sharded but Program.mesh is empty");
    const std::vector<int64_t> &local = facts.shapes[param->buffer()];
    const std::vector<int64_t> global = toVector(param->global_shape());
    LOOM_CHECK(sharding->size() == local.size(),
               label << ": sharding has " << sharding->size()
                     << " entries, expected one per dimension ("
                     << local.size() << ")");
    std::set<uint32_t> used;
    for (uint32_t d = 0; d < sharding->size(); ++d) {
      const DimSharding *ds = sharding->Get(d);
      int64_t blocks = 1;
      for (uint32_t a : toVector(ds ? ds->axes() : nullptr)) {
        LOOM_CHECK(a < facts.mesh.size(),
                   label << ": sharding of dimension " << d << " names axis "
                         << a << ", but the mesh has " << facts.mesh.size()
                         << " axes");
        LOOM_CHECK(used.insert(a).second,
                   label << ": mesh axis " << a
                         << " shards more than one dimension (or twice)");
        blocks *= facts.mesh[a];
      }
      LOOM_CHECK(local[d] * blocks == global[d],
                 label << ": dimension " << d << " has local size "
                       << local[d] << " x " << blocks
                       << " blocks, but the global size is " << global[d]);
    }
  }
  return Status::success();
}

Status checkMesh(const Program &program) {
  if (!program.mesh())
    return Status::success();
  std::set<std::string> names;
  int64_t devices = 1;
  for (uint32_t a = 0; a < program.mesh()->size(); ++a) {
    const MeshAxis *axis = program.mesh()->Get(a);
    const std::string name = nameOf(axis->name());
    LOOM_CHECK(!name.empty(), "mesh axis #" << a << " has no name");
    LOOM_CHECK(names.insert(name).second,
               "mesh axis name '" << name << "' appears twice");
    LOOM_CHECK(axis->size() >= 1 && axis->size() <= (1 << 20),
               "mesh axis '" << name << "' has size " << axis->size());
    devices *= axis->size();
    LOOM_CHECK(devices <= (1 << 24), "the mesh has too many devices");
  }
  LOOM_CHECK(program.mesh()->size() <= 32, "the mesh has more than 32 axes");
  return Status::success();
}

Status checkSpecialBuffer(const Stage &stage, const StageFacts &facts,
                          int32_t index, const char *what, DType want) {
  if (index == -1)
    return Status::success();
  const uint32_t si = stage.index();
  LOOM_CHECK(index >= 0 && static_cast<size_t>(index) < facts.shapes.size(),
             "stage " << si << ": " << what << " buffer " << index
                      << " is out of range (the stage has "
                      << facts.shapes.size() << " buffers; -1 means none)");
  LOOM_CHECK(facts.dtypes[index] == want,
             "stage " << si << ": " << what << " buffer " << index
                      << " must be " << dtypeLabel(want) << ", got "
                      << dtypeLabel(facts.dtypes[index]));
  return Status::success();
}

/// Checks one instruction list ("instruction" or "update instruction").
Status checkInstructionList(
    const Stage &stage, const StageFacts &facts,
    const flatbuffers::Vector<flatbuffers::Offset<Instruction>> *list,
    bool update) {
  if (!list)
    return Status::success();
  const uint32_t si = stage.index();
  const char *kind = update ? "update instruction" : "instruction";
  for (uint32_t i = 0; i < list->size(); ++i) {
    const Instruction *ins = list->Get(i);
    const Opcode op = ins->opcode();
    std::string prefix = "stage " + std::to_string(si) + ", " + kind + " #" +
                         std::to_string(i) + " '" + nameOf(ins->name()) +
                         "' (" + opcodeName(op) + ")";
    LOOM_CHECK(update || !(op == Opcode::SumSquares || op == Opcode::ClipCoef ||
                           op == Opcode::AdamW),
               prefix << ": the optimizer runs once per step, after all "
                         "micro-batches; it belongs in update_instructions");
    LOOM_RETURN_IF_ERROR(
        InstructionChecker(facts, *ins, std::move(prefix)).check());
  }
  return Status::success();
}

/// A pipeline stage: its chunks' instruction lists, stashes and loss, and
/// actions that run every chunk's forward and backward on every
/// micro-batch once, the forward first. A stage without update_instructions
/// is an evaluation's (forward-only): no backward instructions, no stash,
/// and only forward actions, each chunk and micro-batch once.
Status checkPipeline(const Stage &stage, const StageFacts &facts) {
  const Pipeline *pipe = stage.pipeline();
  if (!pipe)
    return Status::success();
  const uint32_t si = stage.index();
  const uint32_t nb = static_cast<uint32_t>(facts.shapes.size());
  LOOM_CHECK(!stage.instructions() || stage.instructions()->size() == 0,
             "stage " << si << ": a pipeline stage runs its chunks' "
                             "instructions, so Stage.instructions must be "
                             "empty");
  const bool forwardOnly =
      !stage.update_instructions() || stage.update_instructions()->size() == 0;
  LOOM_CHECK(pipe->predicted_stash_peak_bytes() >= -1,
             "stage " << si << ": predicted_stash_peak_bytes "
                      << pipe->predicted_stash_peak_bytes()
                      << " is negative (-1: unknown)");
  const auto *chunks = pipe->chunks();
  LOOM_CHECK(chunks && chunks->size() > 0,
             "stage " << si << ": the pipeline has no chunks");
  for (uint32_t c = 0; c < chunks->size(); ++c) {
    const PipelineChunk *chunk = chunks->Get(c);
    const std::string label =
        "stage " + std::to_string(si) + ", chunk #" + std::to_string(c);
    LOOM_RETURN_IF_ERROR(
        checkInstructionList(stage, facts, chunk->forward(), false));
    LOOM_RETURN_IF_ERROR(
        checkInstructionList(stage, facts, chunk->backward(), false));
    const std::vector<uint32_t> out = toVector(chunk->stash_out()),
                                in = toVector(chunk->stash_in());
    LOOM_CHECK(!forwardOnly ||
                   ((!chunk->backward() || chunk->backward()->size() == 0) &&
                    out.empty()),
               label << ": a pipeline stage without update_instructions is "
                        "an evaluation's, but the chunk has backward "
                        "instructions or stashes activations");
    LOOM_CHECK(out.size() == in.size(),
               label << ": " << out.size() << " stashed buffers but "
                     << in.size() << " buffers to restore them into");
    for (size_t k = 0; k < out.size(); ++k) {
      LOOM_CHECK(out[k] < nb && in[k] < nb,
                 label << ": stash buffer index out of range (" << nb
                       << " buffers)");
      LOOM_CHECK(facts.shapes[out[k]] == facts.shapes[in[k]] &&
                     facts.dtypes[out[k]] == facts.dtypes[in[k]],
                 label << ": stash #" << k << " has shape "
                       << shapeString(facts.shapes[out[k]])
                       << " but is restored into "
                       << shapeString(facts.shapes[in[k]]));
    }
    const int32_t loss = chunk->loss();
    LOOM_CHECK(loss < 0 || (static_cast<uint32_t>(loss) < nb &&
                            shapeNumel(facts.shapes[loss]) == 1 &&
                            facts.dtypes[loss] == DType::F32),
               label << ": loss buffer " << loss
                     << " must be an F32 scalar");
  }
  const int64_t m = stage.microbatches();
  std::set<std::pair<uint32_t, uint32_t>> forward, backward;
  if (pipe->actions())
    for (const PipelineAction *a : *pipe->actions()) {
      const std::string name = std::string(a->backward() ? "B" : "F") +
                               std::to_string(a->microbatch()) + "." +
                               std::to_string(a->chunk());
      LOOM_CHECK(a->chunk() < chunks->size() && a->microbatch() < m,
                 "stage " << si << ": action " << name
                          << " names a chunk or micro-batch out of range");
      std::pair<uint32_t, uint32_t> key{a->chunk(), a->microbatch()};
      LOOM_CHECK(!forwardOnly || !a->backward(),
                 "stage " << si << ": action " << name
                          << " is a backward, but the stage has no "
                             "update_instructions (an evaluation's pipeline "
                             "runs forwards only)");
      LOOM_CHECK(a->backward() ? forward.count(key) && backward.insert(key).second
                               : forward.insert(key).second,
                 "stage " << si << ": action " << name
                          << " repeats or precedes its forward");
    }
  const std::set<std::pair<uint32_t, uint32_t>> &complete =
      forwardOnly ? forward : backward;
  LOOM_CHECK(static_cast<int64_t>(complete.size()) ==
                 static_cast<int64_t>(chunks->size()) * m,
             "stage " << si << ": the actions run " << complete.size()
                      << (forwardOnly ? " forwards" : " backwards") << " but "
                      << chunks->size() << " chunks x " << m
                      << " micro-batches need one each");
  return Status::success();
}

/// The compiler's predictions, when present: byte counts, never negative.
Status checkPredictions(const Stage &stage) {
  const Predictions *p = stage.predictions();
  if (!p)
    return Status::success();
  const uint32_t si = stage.index();
  LOOM_CHECK(p->model_state_bytes() >= 0,
             "stage " << si << ": predicted model_state_bytes "
                      << p->model_state_bytes() << " is negative");
  const SentBytes *sent = p->sent_bytes_per_step();
  LOOM_CHECK(sent,
             "stage " << si << ": predictions have no sent_bytes_per_step");
  const std::pair<const char *, int64_t> kinds[] = {
      {"all_reduce", sent->all_reduce()},
      {"all_gather", sent->all_gather()},
      {"reduce_scatter", sent->reduce_scatter()},
      {"all_to_all", sent->all_to_all()},
      {"send", sent->send()}};
  for (const auto &[kind, bytes] : kinds)
    LOOM_CHECK(bytes >= 0, "stage " << si << ": predicted sent_bytes_per_step."
                                    << kind << " " << bytes << " is negative");
  return Status::success();
}

Status checkStage(const Stage &stage, const ModelInfo &model,
                  const Program &program) {
  StageFacts facts;
  facts.stageIndex = stage.index();
  int64_t dpSize = 1;
  if (program.mesh())
    for (const MeshAxis *a : *program.mesh()) {
      facts.mesh.push_back(a->size());
      if (nameOf(a->name()) == "dp")
        dpSize = a->size();
    }
  const uint32_t si = stage.index();
  const bool training =
      stage.update_instructions() && stage.update_instructions()->size() > 0;
  LOOM_RETURN_IF_ERROR(checkBuffers(stage, facts));
  LOOM_RETURN_IF_ERROR(checkParams(stage, facts, training));
  LOOM_RETURN_IF_ERROR(checkSharding(stage, facts));
  LOOM_RETURN_IF_ERROR(
      checkInstructionList(stage, facts, stage.instructions(), false));
  LOOM_RETURN_IF_ERROR(
      checkInstructionList(stage, facts, stage.update_instructions(), true));
  LOOM_RETURN_IF_ERROR(checkPipeline(stage, facts));
  // After the instructions, whose messages are more specific.
  LOOM_RETURN_IF_ERROR(
      checkSpecialBuffer(stage, facts, stage.tokens(), "tokens", DType::I32));
  LOOM_RETURN_IF_ERROR(
      checkSpecialBuffer(stage, facts, stage.targets(), "targets", DType::I32));
  LOOM_RETURN_IF_ERROR(
      checkSpecialBuffer(stage, facts, stage.loss(), "loss", DType::F32));
  if (stage.tokens() >= 0 && stage.targets() >= 0)
    LOOM_CHECK(facts.shapes[stage.tokens()] == facts.shapes[stage.targets()],
               "stage " << si << ": tokens shape "
                        << shapeString(facts.shapes[stage.tokens()])
                        << " differs from targets shape "
                        << shapeString(facts.shapes[stage.targets()]));
  // Scalars: the loss, and the training step's lr / step / grad_norm.
  const std::pair<int32_t, const char *> scalars[] = {
      {stage.loss(), "loss"},
      {stage.lr(), "lr"},
      {stage.step(), "step"},
      {stage.grad_norm(), "grad_norm"}};
  for (const auto &[index, what] : scalars) {
    if (index == stage.loss()) {
      if (index >= 0)
        LOOM_CHECK(shapeNumel(facts.shapes[index]) == 1,
                   "stage " << si << ": loss buffer " << index
                            << " must be a scalar, got shape "
                            << shapeString(facts.shapes[index]));
      continue;
    }
    LOOM_RETURN_IF_ERROR(
        checkSpecialBuffer(stage, facts, index, what, DType::F32));
    if (index >= 0)
      LOOM_CHECK(shapeNumel(facts.shapes[index]) == 1,
                 "stage " << si << ": " << what << " buffer " << index
                          << " must be a scalar, got shape "
                          << shapeString(facts.shapes[index]));
  }
  // Micro-batches split the global batch evenly.
  const int64_t mb = stage.microbatches();
  LOOM_CHECK(mb >= 1 && model.batch() % mb == 0,
             "stage " << si << ": microbatches = " << mb
                      << " must be >= 1 and divide the batch of "
                      << model.batch() << " rows");
  LOOM_CHECK(model.batch() % (mb * dpSize) == 0,
             "stage " << si << ": microbatches = " << mb << " times the dp "
                      << "axis size " << dpSize << " must divide the batch of "
                      << model.batch() << " rows");
  {
    const int64_t want = model.batch() / dpSize / mb * model.seq();
    for (const auto &[index, what] :
         {std::pair<int32_t, const char *>{stage.tokens(), "tokens"},
          {stage.targets(), "targets"}})
      LOOM_CHECK(index < 0 || shapeNumel(facts.shapes[index]) == want,
                 "stage " << si << ": the " << what << " buffer "
                          << shapeString(facts.shapes[index])
                          << " does not hold one micro-batch of batch / "
                             "microbatches"
                          << (dpSize > 1 ? " / dp" : "") << " x seq = "
                          << model.batch() << " / " << mb
                          << (dpSize > 1 ? " / " + std::to_string(dpSize)
                                         : std::string())
                          << " x " << model.seq() << " = " << want
                          << " tokens");
  }
  LOOM_RETURN_IF_ERROR(checkPredictions(stage));
  if (training) {
    LOOM_CHECK(stage.lr() >= 0 && stage.step() >= 0,
               "stage " << si
                        << ": a training program (update_instructions "
                           "is not empty) needs the lr and step scalar "
                           "buffers the runtime sets each step");
  }
  return Status::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Status verifyProgram(const Program &program) {
  LOOM_CHECK(program.format_version() == 0 ||
                 program.format_version() == kFormatVersion,
             "program declares format_version "
                 << program.format_version() << " but this runtime reads "
                 << kFormatVersion << "; recompile the program");
  const ModelInfo *model = program.model();
  LOOM_CHECK(model, "program has no model info (n_layer, batch, ...)");
  const std::pair<const char *, int64_t> fields[] = {
      {"n_layer", model->n_layer()},
      {"n_head", model->n_head()},
      {"n_embd", model->n_embd()},
      {"vocab_size", model->vocab_size()},
      {"n_positions", model->n_positions()},
      {"batch", model->batch()},
      {"seq", model->seq()}};
  for (const auto &[name, value] : fields)
    LOOM_CHECK(value > 0, "program model info: " << name << " = " << value
                                                 << " must be positive");
  LOOM_RETURN_IF_ERROR(checkMesh(program));
  const auto *stages = program.stages();
  LOOM_CHECK(stages && stages->size() > 0, "program has no stages");
  std::set<uint32_t> seen;
  for (uint32_t s = 0; s < stages->size(); ++s) {
    const Stage *stage = stages->Get(s);
    LOOM_CHECK(seen.insert(stage->index()).second,
               "stage #" << s << " repeats stage index " << stage->index());
    LOOM_RETURN_IF_ERROR(checkStage(*stage, *model, program));
  }
  return Status::success();
}

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
