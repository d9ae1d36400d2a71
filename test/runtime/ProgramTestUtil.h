//===- ProgramTestUtil.h - Hand-built programs for tests --------*- C++ -*-===//
//
// Builds program files without the compiler, through the FlatBuffers object
// API: a test fills a ProgramT (buffers placed by a bump allocator at 64-byte
// aligned offsets), mutates whatever field it wants to break, and serializes
// with the envelope. miniGpt() is a 1-layer GPT-2 forward with every compute
// opcode the executor knows; miniGptTrain() adds the backward, gradient
// accumulation and the AdamW update in the form the compiler emits.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_RUNTIME_PROGRAMTESTUTIL_H
#define LOOM_TEST_RUNTIME_PROGRAMTESTUTIL_H

#include "runtime/program/program.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace loom::test {

namespace fb = ::loom::program;

/// A stage under construction.
/// Bytes of a buffer's shape and dtype.
inline uint64_t bufferBytes(const fb::BufferT &b) {
  int64_t n = fb::dtypeBytes(b.dtype);
  for (int64_t d : b.shape)
    n *= d;
  return static_cast<uint64_t>(n);
}

class StageBuilder {
public:
  /// Continues after the buffers `stage` already has.
  explicit StageBuilder(fb::StageT &stage)
      : stage(stage), cursor(stage.arena_bytes) {}

  /// Adds a buffer at the next free 64-byte aligned offset.
  uint32_t buffer(const std::string &name, std::vector<int64_t> shape,
                  fb::DType dtype = fb::DType::F32) {
    auto b = std::make_unique<fb::BufferT>();
    b->name = name;
    b->offset = cursor;
    b->shape = shape;
    b->dtype = dtype;
    cursor += (bufferBytes(*b) + 63) / 64 * 64;
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

  /// Appends an instruction to update_instructions.
  fb::InstructionT &updateOp(fb::Opcode opcode, const std::string &name,
                             std::vector<uint32_t> inputs,
                             std::vector<uint32_t> outputs) {
    op(opcode, name, inputs, outputs);
    stage.update_instructions.push_back(std::move(stage.instructions.back()));
    stage.instructions.pop_back();
    return *stage.update_instructions.back();
  }

  /// The buffer named `name` (aborts the test when absent).
  uint32_t find(const std::string &name) const {
    for (size_t i = 0; i < stage.buffers.size(); ++i)
      if (stage.buffers[i]->name == name)
        return static_cast<uint32_t>(i);
    ADD_FAILURE() << "no buffer named " << name;
    return 0;
  }

  fb::StageT &stage;
  uint64_t cursor = 0;
};

/// Gives every parameter of `s` grad / m / v buffers ("grad.<name>", ...).
inline void addTrainingBuffers(StageBuilder &s) {
  for (auto &param : s.stage.params) {
    const std::vector<int64_t> shape = s.stage.buffers[param->buffer]->shape;
    param->grad_buffer =
        static_cast<int32_t>(s.buffer("grad." + param->name, shape));
    param->m_buffer = static_cast<int32_t>(s.buffer("m." + param->name, shape));
    param->v_buffer = static_cast<int32_t>(s.buffer("v." + param->name, shape));
  }
}

/// Makes the stage a training stage without parameters: an update that
/// copies the lr scalar, and the lr and step scalars the runtime sets each
/// step, so that what only a training step's micro-batch list may hold
/// (last_microbatch_only) can be tested on its own.
inline void makeMinimalTrainingStage(StageBuilder &s) {
  const uint32_t lr = s.buffer("lr", {}), step = s.buffer("step", {}),
                 copy = s.buffer("lr_copy", {});
  s.updateOp(fb::Opcode::Copy, "update", {lr}, {copy});
  s.stage.lr = static_cast<int32_t>(lr);
  s.stage.step = static_cast<int32_t>(step);
}

/// Appends the optimizer the compiler emits: one SumSquares over every
/// gradient and its ClipCoef, then one in-place AdamW per parameter (weight
/// decay on the parameters marked `decay`); sets Stage.lr / step / grad_norm.
inline void addOptimizer(StageBuilder &s, double maxNorm,
                         double weightDecay = 0.1) {
  const uint32_t lr = s.buffer("lr", {}), step = s.buffer("step", {});
  const uint32_t sumsq = s.buffer("grad_sum_squares", {}),
                 norm = s.buffer("grad_norm", {}),
                 coef = s.buffer("clip_coef", {});
  std::vector<uint32_t> grads;
  for (auto &param : s.stage.params)
    grads.push_back(static_cast<uint32_t>(param->grad_buffer));
  s.updateOp(fb::Opcode::SumSquares, "sum_squares", grads, {sumsq});
  s.updateOp(fb::Opcode::ClipCoef, "clip", {sumsq}, {norm, coef}).max_norm =
      maxNorm;
  for (auto &param : s.stage.params) {
    const uint32_t p = param->buffer, g = param->grad_buffer,
                   m = param->m_buffer, v = param->v_buffer;
    auto &ins = s.updateOp(fb::Opcode::AdamW, "adamw." + param->name,
                           {p, g, m, v, lr, step, coef}, {p, m, v});
    ins.beta1 = 0.9;
    ins.beta2 = 0.95;
    ins.adam_eps = 1e-8;
    ins.weight_decay = param->decay ? weightDecay : 0.0;
  }
  s.stage.lr = static_cast<int32_t>(lr);
  s.stage.step = static_cast<int32_t>(step);
  s.stage.grad_norm = static_cast<int32_t>(norm);
}

/// Gives `stage` the compiler's predictions: model state bytes and bytes sent
/// per step per collective kind (all_reduce, all_gather, reduce_scatter,
/// all_to_all, send).
inline void setPredictions(fb::StageT &stage, int64_t modelStateBytes,
                           const std::vector<int64_t> &sent) {
  stage.predictions = std::make_unique<fb::PredictionsT>();
  stage.predictions->model_state_bytes = modelStateBytes;
  auto bytes = std::make_unique<fb::SentBytesT>();
  bytes->all_reduce = sent.at(0);
  bytes->all_gather = sent.at(1);
  bytes->reduce_scatter = sent.at(2);
  bytes->all_to_all = sent.at(3);
  bytes->send = sent.at(4);
  stage.predictions->sent_bytes_per_step = std::move(bytes);
}

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

#if defined(LOOM_PATH) && defined(LOOM_SOURCE_DIR)
/// `loom compile` flags of one training step of tiny.json (global batch 8
/// of T = 32) under each kind of strategy: what a figure of the model
/// (parameter count, FLOPs) must not depend on.
inline const char *const kTinyTrainingStrategies[] = {
    "--batch 8 --seq 32 --train",
    "--batch 8 --seq 32 --train --microbatches 2",
    "--batch 8 --seq 32 --train --mesh dp=2 --zero 3",
    "--batch 8 --seq 32 --train --mesh tp=2",
    "--batch 8 --seq 32 --train --mesh tp=2 --sequence-parallel",
    "--batch 8 --seq 32 --train --mesh pp=2 --microbatches 2",
    "--batch 8 --seq 32 --train --mesh dp=2,tp=2,pp=2 --zero 1 "
    "--microbatches 2"};

/// Compiles examples/`config` with `loom compile --config ... FLAGS -o`
/// into a temporary file and loads it; false (with a test failure) on
/// error.
inline bool compileExample(const std::string &config, const std::string &flags,
                           fb::LoadedProgram &loaded) {
  const std::string out =
      ::testing::TempDir() + "compiled-" +
      std::to_string(std::hash<std::string>()(config + flags)) + ".loom";
  const std::string cmd = std::string(LOOM_PATH) + " compile --config " +
                          LOOM_SOURCE_DIR + "/examples/" + config + " " +
                          flags + " -o " + out + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "failed: " << cmd;
    return false;
  }
  const Status s = fb::loadProgramFile(out, loaded);
  std::remove(out.c_str());
  EXPECT_TRUE(s.ok()) << s.toString();
  return s.ok();
}

/// A compiled program and how many pairs of each kind a pair planner
/// (gelu_epilogues.h, residual_norms.h) should find in its stage 0.
struct CompiledPairsCase {
  const char *config, *flags;
  size_t forward, backward;
};

/// Compiles each case and counts the pairs `plan` finds, each starting
/// with `forwardOp` or `backwardOp`.
template <typename Pair>
void expectCompiledPairs(const std::vector<CompiledPairsCase> &cases,
                         std::vector<Pair> (*plan)(const fb::Stage &),
                         fb::Opcode forwardOp, fb::Opcode backwardOp) {
  for (const CompiledPairsCase &c : cases) {
    fb::LoadedProgram loaded;
    if (!compileExample(c.config, c.flags, loaded))
      continue;
    SCOPED_TRACE(std::string(c.config) + " " + c.flags);
    const fb::Stage &stage = *loaded.root()->stages()->Get(0);
    size_t forward = 0, backward = 0;
    for (const Pair &p : plan(stage)) {
      EXPECT_EQ(stage.instructions()->Get(p.first)->opcode(),
                p.backward ? backwardOp : forwardOp);
      ++(p.backward ? backward : forward);
    }
    EXPECT_EQ(forward, c.forward);
    EXPECT_EQ(backward, c.backward);
  }
}
#endif

/// A one-stage program a test builds and then re-places buffers of (as the
/// buffer planner reuses bytes), for the planners that read the packed
/// tables (gelu_epilogues.h, residual_norms.h).
struct PlacedStage {
  std::unique_ptr<fb::ProgramT> program = emptyProgram(2, 4, 16);
  StageBuilder s{*program->stages[0]};

  uint32_t operator[](const std::string &name) const { return s.find(name); }
  fb::BufferT &buffer(const std::string &name) {
    return *program->stages[0]->buffers[s.find(name)];
  }
  fb::InstructionT &instruction(size_t i) {
    return *program->stages[0]->instructions[i];
  }
  /// Puts buffer `name` at `other`'s bytes, `shift` bytes on.
  void alias(const std::string &name, const std::string &other,
             uint64_t shift = 0) {
    buffer(name).offset = buffer(other).offset + shift;
  }
  /// A new buffer of `other`'s shape and dtype on its bytes.
  uint32_t aliasOf(const std::string &other) {
    const uint32_t b =
        s.buffer("alias." + other, buffer(other).shape, buffer(other).dtype);
    program->stages[0]->buffers[b]->offset = buffer(other).offset;
    return b;
  }
  /// Stage 0 packed (valid until the next call).
  const fb::Stage &packed() {
    packer.Clear();
    packer.Finish(fb::Program::Pack(packer, program.get()));
    return *fb::GetProgram(packer.GetBufferPointer())->stages()->Get(0);
  }

private:
  flatbuffers::FlatBufferBuilder packer;
};

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
  const uint32_t probs = s.buffer("att.stats", {B, d.NH, T});
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

/// A bigram language model: logits = table[tokens] (an Embedding of the
/// [Vp, Vp] parameter "wte.weight"), loss = cross_entropy(logits, targets).
/// Row v of the table holds the logits of the token after v, so a test sets
/// it to make greedy sampling predictable.
inline std::unique_ptr<fb::ProgramT> bigramLm(int64_t B, int64_t T, int64_t V,
                                              int64_t Vp) {
  auto p = emptyProgram(B, T, V);
  StageBuilder s(*p->stages[0]);
  const uint32_t table = s.param("wte.weight", {Vp, Vp});
  const uint32_t ids = s.buffer("tokens", {B, T}, fb::DType::I32);
  const uint32_t tgt = s.buffer("targets", {B, T}, fb::DType::I32);
  const uint32_t logits = s.buffer("logits", {B, T, Vp});
  const uint32_t losses = s.buffer("losses", {B * T});
  const uint32_t loss = s.buffer("loss", {});
  s.op(fb::Opcode::Embedding, "wte", {table, ids}, {logits});
  s.op(fb::Opcode::CrossEntropy, "loss", {logits, tgt}, {loss}, {losses});
  s.stage.tokens = static_cast<int32_t>(ids);
  s.stage.targets = static_cast<int32_t>(tgt);
  s.stage.loss = static_cast<int32_t>(loss);
  return p;
}

/// Options of miniGptTrain().
struct MiniGptTrainOptions {
  /// Stage.microbatches; the tokens buffer holds batch / microbatches rows.
  int64_t microbatches = 1;
  /// ClipCoef max_norm (<= 0: no clipping).
  double maxNorm = 1.0;
  /// The backward seed dloss; < 0 means 1 / microbatches (what the compiler
  /// emits). Rows x 1 gives the gradient of the summed per-token losses.
  double seed = -1.0;
};

/// miniGpt() trained: per micro-batch the forward, the backward with every
/// gradient opcode the GPT needs (Fill seed, CrossEntropyGrad, MatmulGrad of
/// the tied head, LayerNormGrad, LinearGrad, GeluGrad, AttentionGrad,
/// ReduceLeading for wpe, EmbeddingGrad) and in-place Add accumulation into
/// the parameters' grad buffers; then SumSquares + ClipCoef + AdamW.
/// Gradient buffers are named "d.<activation>" and "d<op>.<param>".
inline std::unique_ptr<fb::ProgramT>
miniGptTrain(const MiniGptDims &d = {}, const MiniGptTrainOptions &o = {}) {
  MiniGptDims local = d;
  local.B = d.B / o.microbatches;
  auto p = miniGpt(local);
  p->model->batch = d.B;
  fb::StageT &st = *p->stages[0];
  st.microbatches = static_cast<uint32_t>(o.microbatches);
  StageBuilder s(st);
  addTrainingBuffers(s);
  const int64_t b = local.B, T = d.T, C = d.C;
  auto grad = [&](const std::string &name) {
    for (auto &param : st.params)
      if (param->name == name)
        return static_cast<uint32_t>(param->grad_buffer);
    ADD_FAILURE() << "no param " << name;
    return 0u;
  };
  // Accumulates a parameter gradient in place: grad += tmp.
  auto acc = [&](const std::string &name, uint32_t tmp) {
    s.op(fb::Opcode::Add, "acc." + name, {grad(name), tmp}, {grad(name)});
  };
  auto act = [&](const std::string &name, std::vector<int64_t> shape) {
    return s.buffer("d." + name, shape);
  };
  // dinput, dweight, dbias of a Linear; accumulates the parameter grads.
  auto linearGrad = [&](const std::string &layer, uint32_t dout,
                        const std::string &input, uint32_t dinput) {
    const std::string w = layer + ".weight", bias = layer + ".bias";
    const auto wShape = st.buffers[s.find(w)]->shape;
    const uint32_t dw = s.buffer("dlinear." + w, wShape);
    const uint32_t db = s.buffer("dlinear." + bias, {wShape[1]});
    s.op(fb::Opcode::LinearGrad, layer + ".grad",
         {dout, s.find(input), s.find(w)}, {dinput, dw, db});
    acc(w, dw);
    acc(bias, db);
  };
  auto layerNormGrad = [&](const std::string &layer, uint32_t dout,
                           const std::string &input, uint32_t dinput) {
    const std::string w = layer + ".weight", bias = layer + ".bias";
    const uint32_t dw = s.buffer("dln." + w, {C}),
                   db = s.buffer("dln." + bias, {C});
    const uint32_t mean = s.buffer(layer + ".grad.mean", {b * T});
    const uint32_t rstd = s.buffer(layer + ".grad.rstd", {b * T});
    s.op(fb::Opcode::LayerNormGrad, layer + ".grad",
         {dout, s.find(input), s.find(w)}, {dinput, dw, db}, {mean, rstd})
        .epsilon = 1e-5;
    acc(w, dw);
    acc(bias, db);
  };

  // 1. Seed and loss head.
  const uint32_t dloss = s.buffer("d.loss", {});
  s.op(fb::Opcode::Fill, "loss.seed", {}, {dloss}).value =
      o.seed >= 0 ? o.seed : 1.0 / static_cast<double>(o.microbatches);
  const uint32_t dlogits = act("logits", {b, T, d.Vp});
  s.op(fb::Opcode::CrossEntropyGrad, "loss.grad",
       {dloss, s.find("logits"), s.find("targets")}, {dlogits});
  const uint32_t dlnf = act("lnf", {b, T, C});
  const uint32_t dwteHead = s.buffer("dmatmul.wte.weight", {d.Vp, C});
  s.op(fb::Opcode::MatmulGrad, "lm_head.grad",
       {dlogits, s.find("lnf"), s.find("wte.weight")}, {dlnf, dwteHead})
      .transpose_rhs = true;
  acc("wte.weight", dwteHead);
  const uint32_t dh2 = act("h2", {b, T, C});
  layerNormGrad("ln_f", dlnf, "h2", dh2);
  // 2. MLP (h2 = h1 + mlp).
  const uint32_t dgl = act("gelu", {b, T, 4 * C});
  linearGrad("h.0.mlp.c_proj", dh2, "gelu", dgl);
  const uint32_t dfc = act("fc", {b, T, 4 * C});
  s.op(fb::Opcode::GeluGrad, "h.0.mlp.gelu.grad", {dgl, s.find("fc")}, {dfc});
  const uint32_t dln2 = act("ln2", {b, T, C});
  linearGrad("h.0.mlp.c_fc", dfc, "ln2", dln2);
  const uint32_t dh1 = act("h1", {b, T, C});
  layerNormGrad("h.0.ln_2", dln2, "h1", dh1);
  s.op(fb::Opcode::Add, "h.0.res2.grad", {dh1, dh2}, {dh1});
  // 3. Attention (h1 = x + proj).
  const uint32_t datt = act("att", {b, T, C});
  linearGrad("h.0.attn.c_proj", dh1, "att", datt);
  const uint32_t dqkv = act("qkv", {b, T, 3 * C});
  s.op(fb::Opcode::AttentionGrad, "h.0.attn.grad", {datt, s.find("qkv")},
       {dqkv})
      .num_heads = d.NH;
  const uint32_t dln1 = act("ln1", {b, T, C});
  linearGrad("h.0.attn.c_attn", dqkv, "ln1", dln1);
  const uint32_t dx = act("x", {b, T, C});
  layerNormGrad("h.0.ln_1", dln1, "x", dx);
  s.op(fb::Opcode::Add, "h.0.res1.grad", {dx, dh1}, {dx});
  // 4. Embeddings (x = wte[ids] + wpe).
  const uint32_t dwpe = s.buffer("dreduce.wpe.weight", {T, C});
  s.op(fb::Opcode::ReduceLeading, "wpe.grad", {dx}, {dwpe});
  acc("wpe.weight", dwpe);
  const uint32_t dwteEmb = s.buffer("dembedding.wte.weight", {d.Vp, C});
  s.op(fb::Opcode::EmbeddingGrad, "wte.grad", {dx, s.find("tokens")},
       {dwteEmb});
  acc("wte.weight", dwteEmb);
  // 5. Optimizer.
  addOptimizer(s, o.maxNorm);
  return p;
}

/// miniGptTrain() with a batch of 4 rows in 2 micro-batches of 2: the
/// smallest step that accumulates gradients, as the backend and memory
/// tests run it.
inline std::unique_ptr<fb::ProgramT> miniGptTrainTwoMicrobatches() {
  MiniGptDims d;
  d.B = 4;
  MiniGptTrainOptions o;
  o.microbatches = 2;
  return miniGptTrain(d, o);
}

/// Makes a miniGptTrain() program data parallel over a new mesh axis "dp"
/// of size `dp`: model.batch becomes dp x the rows the program holds, an
/// AllReduce(avg) of every gradient accumulator opens update_instructions
/// (before SumSquares) and one of the loss follows the CrossEntropy.
inline void makeDataParallel(fb::ProgramT &p, int64_t dp) {
  p.model->batch *= dp;
  auto axis = std::make_unique<fb::MeshAxisT>();
  axis->name = "dp";
  axis->size = dp;
  p.mesh.push_back(std::move(axis));
  fb::StageT &st = *p.stages[0];
  auto allReduce = [](const std::string &name, uint32_t b) {
    auto ins = std::make_unique<fb::InstructionT>();
    ins->opcode = fb::Opcode::AllReduce;
    ins->name = name;
    ins->inputs = {b};
    ins->outputs = {b};
    ins->axes = {static_cast<uint32_t>(0)};
    ins->reduction = fb::Reduction::Avg;
    ins->reason = "data-parallel average";
    return ins;
  };
  std::vector<std::unique_ptr<fb::InstructionT>> update;
  for (auto &param : st.params)
    update.push_back(allReduce("dp.sync." + param->name,
                               static_cast<uint32_t>(param->grad_buffer)));
  for (auto &u : st.update_instructions)
    update.push_back(std::move(u));
  st.update_instructions = std::move(update);
  size_t at = 0;
  while (st.instructions[at]->opcode != fb::Opcode::CrossEntropy)
    ++at;
  st.instructions.insert(st.instructions.begin() + at + 1,
                         allReduce("dp.loss", static_cast<uint32_t>(st.loss)));
}

/// After makeDataParallel: the gradient all-reduces ("dp.sync.*") move from
/// the update to the end of the micro-batch instructions, run in the last
/// micro-batch only (Instruction.last_microbatch_only, DDP's no_sync), as
/// --loom-partition places a DDP step's reductions with several
/// micro-batches.
inline void reduceGradientsInLastMicrobatch(fb::ProgramT &p) {
  fb::StageT &st = *p.stages[0];
  std::vector<std::unique_ptr<fb::InstructionT>> update;
  for (auto &u : st.update_instructions) {
    if (u->name.rfind("dp.sync.", 0) == 0) {
      u->last_microbatch_only = true;
      st.instructions.push_back(std::move(u));
    } else {
      update.push_back(std::move(u));
    }
  }
  st.update_instructions = std::move(update);
}

/// Makes a miniGptTrain() program a one-stage pipeline (Stage.pipeline):
/// one chunk whose forward is the instructions up to the loss and whose
/// backward is the rest, the loss buffer moved to the chunk, the logits
/// kept in the chunk's stash slot (the forward writes them there, the
/// backward reads them there), and actions F0 B0 F1 B1 ... over the
/// micro-batches.
inline void makeSingleChunkPipeline(fb::ProgramT &p) {
  fb::StageT &st = *p.stages[0];
  auto pipe = std::make_unique<fb::PipelineT>();
  pipe->schedule = "1f1b";
  pipe->stages = 1;
  auto chunk = std::make_unique<fb::PipelineChunkT>();
  bool backward = false;
  for (auto &ins : st.instructions) {
    backward |= ins->name == "loss.seed";
    (backward ? chunk->backward : chunk->forward).push_back(std::move(ins));
  }
  st.instructions.clear();
  chunk->loss = st.loss;
  st.loss = -1;
  for (uint32_t b = 0; b < st.buffers.size(); ++b)
    if (st.buffers[b]->name == "logits") {
      fb::BufferT &logits = *st.buffers[b];
      logits.stash = true;
      logits.offset = 0;
      chunk->stash_out = {b};
      chunk->stash_in = {b};
      chunk->stash_bytes = (bufferBytes(logits) + 63) / 64 * 64;
    }
  pipe->chunks.push_back(std::move(chunk));
  for (uint32_t mb = 0; mb < st.microbatches; ++mb) {
    pipe->actions.emplace_back(0, mb, false);
    pipe->actions.emplace_back(0, mb, true);
  }
  st.pipeline = std::move(pipe);
}

/// Makes a miniGptTrain() program an evaluation's one-stage pipeline: as
/// makeSingleChunkPipeline, then without the backward, the stash, the
/// backward actions and the update (an evaluation's stage: forwards only).
inline void makeForwardOnlyPipeline(fb::ProgramT &p) {
  makeSingleChunkPipeline(p);
  fb::StageT &st = *p.stages[0];
  st.update_instructions.clear();
  fb::PipelineChunkT &chunk = *st.pipeline->chunks[0];
  chunk.backward.clear();
  chunk.stash_out.clear();
  chunk.stash_in.clear();
  // An evaluation's forward keeps nothing, so it has no slot: the logits
  // go back to the arena.
  chunk.stash_bytes = 0;
  for (auto &b : st.buffers)
    if (b->stash) {
      b->stash = false;
      b->offset = st.arena_bytes;
      st.arena_bytes += (bufferBytes(*b) + 63) / 64 * 64;
    }
  auto &actions = st.pipeline->actions;
  actions.erase(
      std::remove_if(actions.begin(), actions.end(),
                     [](const fb::PipelineAction &a) { return a.backward(); }),
      actions.end());
}

/// Makes `p` what --loom-mixed-precision emits (the program.fbs contract):
/// every F32 buffer of rank >= 1 becomes BF16 (weights, activations, saved
/// values, gradients) except the AdamW moments; scalars stay F32. In a
/// training program each parameter gets an fp32 master ("master.<name>",
/// the m buffer's shape) that its AdamW updates instead of the parameter,
/// followed by a Cast of the new master into the bf16 parameter. Offsets
/// stay: a bf16 buffer needs half the bytes its fp32 one had.
inline void makeMixedPrecision(fb::ProgramT &p) {
  for (auto &stage : p.stages) {
    fb::StageT &st = *stage;
    std::vector<bool> keep(st.buffers.size(), false);
    for (auto &param : st.params)
      for (int32_t b : {param->m_buffer, param->v_buffer})
        if (b >= 0)
          keep[static_cast<size_t>(b)] = true;
    for (size_t b = 0; b < st.buffers.size(); ++b)
      if (!keep[b] && st.buffers[b]->dtype == fb::DType::F32 &&
          !st.buffers[b]->shape.empty())
        st.buffers[b]->dtype = fb::DType::BF16;
    StageBuilder s(st);
    std::vector<std::unique_ptr<fb::InstructionT>> update;
    for (auto &ins : st.update_instructions) {
      if (ins->opcode != fb::Opcode::AdamW) {
        update.push_back(std::move(ins));
        continue;
      }
      const uint32_t weights = ins->inputs[0];
      fb::ParamT *param = nullptr;
      for (auto &candidate : st.params)
        if (candidate->buffer == weights)
          param = candidate.get();
      EXPECT_TRUE(param) << "AdamW " << ins->name << " updates no parameter";
      if (!param)
        return;
      const uint32_t master =
          s.buffer("master." + param->name,
                   st.buffers[static_cast<size_t>(param->m_buffer)]->shape);
      param->master_buffer = static_cast<int32_t>(master);
      ins->inputs[0] = master;
      ins->outputs[0] = master;
      auto cast = std::make_unique<fb::InstructionT>();
      cast->opcode = fb::Opcode::Cast;
      cast->name = "cast." + param->name;
      cast->inputs = {master};
      cast->outputs = {weights};
      update.push_back(std::move(ins));
      update.push_back(std::move(cast));
    }
    st.update_instructions = std::move(update);
  }
}

} // namespace loom::test

#endif // LOOM_TEST_RUNTIME_PROGRAMTESTUTIL_H
