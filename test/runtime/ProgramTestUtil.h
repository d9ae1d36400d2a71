//===- ProgramTestUtil.h - Hand-built programs for runtime tests -*- C++
//-*-===//
//
// Builds program files without the compiler, through the FlatBuffers object
// API: a test fills a ProgramT (buffers placed by a bump allocator at 64-byte
// aligned offsets), mutates whatever field it wants to break, and serializes
// with the envelope. miniGpt() is a 1-layer GPT-2 forward with every compute
// opcode the executor knows.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_RUNTIME_PROGRAMTESTUTIL_H
#define LOOM_TEST_RUNTIME_PROGRAMTESTUTIL_H

#include "runtime/program/program.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::test {

namespace fb = ::loom::program;

/// A stage under construction.
class StageBuilder {
public:
  explicit StageBuilder(fb::StageT &stage) : stage(stage) {}

  /// Adds a buffer at the next free 64-byte aligned offset.
  uint32_t buffer(const std::string &name, std::vector<int64_t> shape,
                  fb::DType dtype = fb::DType::F32) {
    auto b = std::make_unique<fb::BufferT>();
    b->name = name;
    b->offset = cursor;
    b->shape = shape;
    b->dtype = dtype;
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    cursor += (n * fb::dtypeBytes(dtype) + 63) / 64 * 64;
    stage.arena_bytes = cursor;
    stage.buffers.push_back(std::move(b));
    return static_cast<uint32_t>(stage.buffers.size() - 1);
  }

  /// Adds a whole (unsliced) parameter with its buffer.
  uint32_t param(const std::string &name, std::vector<int64_t> shape,
                 fb::InitKind init = fb::InitKind::Normal, double std = 0.2) {
    return slicedParam(name, shape, std::vector<int64_t>(shape.size(), 0),
                       shape, init, std);
  }

  /// Adds a parameter holding the box `offset` + `local` of `global`.
  uint32_t slicedParam(const std::string &name, std::vector<int64_t> global,
                       std::vector<int64_t> offset, std::vector<int64_t> local,
                       fb::InitKind init = fb::InitKind::Normal,
                       double std = 0.2) {
    const uint32_t b = buffer(name, local);
    auto p = std::make_unique<fb::ParamT>();
    p->name = name;
    p->global_shape = global;
    p->slice_offset = offset;
    p->buffer = b;
    p->init = init;
    p->init_std = std;
    p->decay = global.size() >= 2;
    stage.params.push_back(std::move(p));
    return b;
  }

  /// Appends an instruction; returns it for attribute edits.
  fb::InstructionT &op(fb::Opcode opcode, const std::string &name,
                       std::vector<uint32_t> inputs,
                       std::vector<uint32_t> outputs,
                       std::vector<uint32_t> scratch = {}) {
    auto ins = std::make_unique<fb::InstructionT>();
    ins->opcode = opcode;
    ins->name = name;
    ins->inputs = inputs;
    ins->outputs = outputs;
    ins->scratch = scratch;
    stage.instructions.push_back(std::move(ins));
    return *stage.instructions.back();
  }

  fb::StageT &stage;
  uint64_t cursor = 0;
};

/// An empty single-stage program with model info filled in.
inline std::unique_ptr<fb::ProgramT> emptyProgram(int64_t batch, int64_t seq,
                                                  int64_t vocab,
                                                  int64_t embd = 16,
                                                  int64_t heads = 2) {
  auto p = std::make_unique<fb::ProgramT>();
  p->format_version = fb::kFormatVersion;
  p->producer = "loom runtime tests";
  p->model = std::make_unique<fb::ModelInfoT>();
  p->model->n_layer = 1;
  p->model->n_head = heads;
  p->model->n_embd = embd;
  p->model->vocab_size = vocab;
  p->model->n_positions = seq;
  p->model->batch = batch;
  p->model->seq = seq;
  p->stages.push_back(std::make_unique<fb::StageT>());
  return p;
}

/// Serializes `program` into program file bytes (FlatBuffer + envelope).
inline std::string serialize(const fb::ProgramT &program) {
  flatbuffers::FlatBufferBuilder fbb;
  fb::FinishProgramBuffer(fbb, fb::Program::Pack(fbb, &program));
  return fb::encodeProgramFile(fbb.GetBufferPointer(), fbb.GetSize());
}

/// Dimensions of miniGpt().
struct MiniGptDims {
  int64_t B = 2, T = 8, C = 16, NH = 2, V = 50, Vp = 64;
};

/// A 1-layer GPT-2 forward in the shape the compiler emits:
///   x = wte[ids] + wpe; h = x + c_proj(attn(c_attn(ln_1(x))));
///   h = h + mlp_proj(gelu(c_fc(ln_2(h)))); logits = ln_f(h) wte^T;
///   loss = cross_entropy(logits, targets)
/// wte has Vp >= V rows (padded vocabulary).
inline std::unique_ptr<fb::ProgramT> miniGpt(const MiniGptDims &d = {}) {
  auto p = emptyProgram(d.B, d.T, d.V, d.C, d.NH);
  StageBuilder s(*p->stages[0]);
  const int64_t B = d.B, T = d.T, C = d.C;
  const uint32_t wte = s.param("wte.weight", {d.Vp, C});
  const uint32_t wpe = s.param("wpe.weight", {T, C});
  const uint32_t ln1w = s.param("h.0.ln_1.weight", {C}, fb::InitKind::Ones);
  const uint32_t ln1b = s.param("h.0.ln_1.bias", {C}, fb::InitKind::Zeros);
  const uint32_t attw = s.param("h.0.attn.c_attn.weight", {C, 3 * C});
  const uint32_t attb = s.param("h.0.attn.c_attn.bias", {3 * C});
  const uint32_t prjw = s.param("h.0.attn.c_proj.weight", {C, C});
  const uint32_t prjb = s.param("h.0.attn.c_proj.bias", {C});
  const uint32_t ln2w = s.param("h.0.ln_2.weight", {C}, fb::InitKind::Ones);
  const uint32_t ln2b = s.param("h.0.ln_2.bias", {C}, fb::InitKind::Zeros);
  const uint32_t fcw = s.param("h.0.mlp.c_fc.weight", {C, 4 * C});
  const uint32_t fcb = s.param("h.0.mlp.c_fc.bias", {4 * C});
  const uint32_t mpw = s.param("h.0.mlp.c_proj.weight", {4 * C, C});
  const uint32_t mpb = s.param("h.0.mlp.c_proj.bias", {C});
  const uint32_t lnfw = s.param("ln_f.weight", {C}, fb::InitKind::Ones);
  const uint32_t lnfb = s.param("ln_f.bias", {C}, fb::InitKind::Zeros);

  const uint32_t ids = s.buffer("tokens", {B, T}, fb::DType::I32);
  const uint32_t tgt = s.buffer("targets", {B, T}, fb::DType::I32);
  const uint32_t emb = s.buffer("emb", {B, T, C});
  const uint32_t x = s.buffer("x", {B, T, C});
  const uint32_t ln1 = s.buffer("ln1", {B, T, C});
  const uint32_t m1 = s.buffer("ln1.mean", {B * T});
  const uint32_t r1 = s.buffer("ln1.rstd", {B * T});
  const uint32_t qkv = s.buffer("qkv", {B, T, 3 * C});
  const uint32_t att = s.buffer("att", {B, T, C});
  const uint32_t probs = s.buffer("att.probs", {B, d.NH, T, T});
  const uint32_t proj = s.buffer("proj", {B, T, C});
  const uint32_t h1 = s.buffer("h1", {B, T, C});
  const uint32_t ln2 = s.buffer("ln2", {B, T, C});
  const uint32_t fc = s.buffer("fc", {B, T, 4 * C});
  const uint32_t gl = s.buffer("gelu", {B, T, 4 * C});
  const uint32_t mp = s.buffer("mlp", {B, T, C});
  const uint32_t h2 = s.buffer("h2", {B, T, C});
  const uint32_t lnf = s.buffer("lnf", {B, T, C});
  const uint32_t logits = s.buffer("logits", {B, T, d.Vp});
  const uint32_t losses = s.buffer("losses", {B * T});
  const uint32_t loss = s.buffer("loss", {});

  s.op(fb::Opcode::Embedding, "wte", {wte, ids}, {emb});
  s.op(fb::Opcode::Add, "wpe", {emb, wpe}, {x});
  s.op(fb::Opcode::LayerNorm, "h.0.ln_1", {x, ln1w, ln1b}, {ln1}, {m1, r1})
      .epsilon = 1e-5;
  s.op(fb::Opcode::Linear, "h.0.attn.c_attn", {ln1, attw, attb}, {qkv});
  s.op(fb::Opcode::Attention, "h.0.attn", {qkv}, {att}, {probs}).num_heads =
      d.NH;
  s.op(fb::Opcode::Linear, "h.0.attn.c_proj", {att, prjw, prjb}, {proj});
  s.op(fb::Opcode::Add, "h.0.res1", {x, proj}, {h1});
  s.op(fb::Opcode::LayerNorm, "h.0.ln_2", {h1, ln2w, ln2b}, {ln2}).epsilon =
      1e-5;
  s.op(fb::Opcode::Linear, "h.0.mlp.c_fc", {ln2, fcw, fcb}, {fc});
  s.op(fb::Opcode::Gelu, "h.0.mlp.gelu", {fc}, {gl});
  s.op(fb::Opcode::Linear, "h.0.mlp.c_proj", {gl, mpw, mpb}, {mp});
  s.op(fb::Opcode::Add, "h.0.res2", {h1, mp}, {h2});
  s.op(fb::Opcode::LayerNorm, "ln_f", {h2, lnfw, lnfb}, {lnf}).epsilon = 1e-5;
  s.op(fb::Opcode::Matmul, "lm_head", {lnf, wte}, {logits}).transpose_rhs =
      true;
  s.op(fb::Opcode::CrossEntropy, "loss", {logits, tgt}, {loss}, {losses});
  s.stage.tokens = static_cast<int32_t>(ids);
  s.stage.targets = static_cast<int32_t>(tgt);
  s.stage.loss = static_cast<int32_t>(loss);
  return p;
}

} // namespace loom::test

#endif // LOOM_TEST_RUNTIME_PROGRAMTESTUTIL_H
