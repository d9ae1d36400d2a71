//===- ProgramLoaderTest.cpp - Envelope and verifier tests ------*- C++ -*-===//
//
// One test per family of verifier rules: each breaks one field of an
// otherwise valid program and checks that loading fails with a message that
// names what is wrong (and, for instructions, the stage, index and name).
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

using namespace loom;
using namespace loom::test;

namespace {

Status load(const fb::ProgramT &p) {
  fb::LoadedProgram loaded;
  return fb::loadProgramBytes(serialize(p), "test.loom", loaded);
}

/// Applies `edit` to a fresh mini GPT and expects a load error containing
/// every string of `needles`.
void expectRejected(const std::function<void(fb::ProgramT &)> &edit,
                    const std::vector<std::string> &needles) {
  auto p = miniGpt();
  edit(*p);
  Status s = load(*p);
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << needles[0] << "'";
  for (const std::string &n : needles)
    EXPECT_NE(s.message().find(n), std::string::npos)
        << "message: " << s.message() << "\nmissing: " << n;
}

fb::StageT &stage0(fb::ProgramT &p) { return *p.stages[0]; }

/// The instruction named `name` in stage 0.
fb::InstructionT &instr(fb::ProgramT &p, const std::string &name) {
  for (auto &i : stage0(p).instructions)
    if (i->name == name)
      return *i;
  ADD_FAILURE() << "no instruction " << name;
  return *stage0(p).instructions[0];
}

//===----------------------------------------------------------------------===//
// Envelope
//===----------------------------------------------------------------------===//

TEST(ProgramEnvelope, RoundTrip) {
  const uint8_t payload[] = {1, 2, 3, 4, 5};
  std::string file = fb::encodeProgramFile(payload, sizeof(payload));
  ASSERT_EQ(file.size(), 32u + 5u);
  const uint8_t *out = nullptr;
  size_t size = 0;
  std::string error;
  ASSERT_TRUE(fb::decodeProgramFile(file, &out, &size, &error)) << error;
  ASSERT_EQ(size, 5u);
  EXPECT_EQ(std::memcmp(out, payload, 5), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(out) -
                reinterpret_cast<uintptr_t>(file.data()),
            32u);
}

TEST(ProgramEnvelope, ClearErrors) {
  const uint8_t payload[] = {9, 8, 7, 6, 5, 4, 3, 2};
  const std::string good = fb::encodeProgramFile(payload, sizeof(payload));
  auto error = [](const std::string &file) {
    std::string e;
    const uint8_t *p;
    size_t n;
    EXPECT_FALSE(fb::decodeProgramFile(file, &p, &n, &e));
    return e;
  };
  EXPECT_NE(error("").find("not a Loom program"), std::string::npos);
  EXPECT_NE(error("{\"json\": 1}").find("bad magic"), std::string::npos);
  std::string v = good;
  v[8] = 7;
  EXPECT_NE(error(v).find("version 7 unsupported"), std::string::npos)
      << error(v);
  EXPECT_NE(error(v).find("recompile"), std::string::npos);
  // Version 1 files had ClipGradNorm at opcode 24 (SumSquares now), version
  // 2 ones no Param.unpadded_rows (a padded vocabulary would be initialized
  // and saved whole), version 3 ones no Buffer.stash (kept activations
  // copied aside, not in stash slots), version 4 ones no
  // Instruction.last_microbatch_only (a DDP step's reductions would run in
  // every micro-batch): all refused.
  for (char old : {1, 2, 3, 4}) {
    std::string file = good;
    file[8] = old;
    EXPECT_NE(error(file).find("version " + std::to_string(old) +
                               " unsupported (this runtime reads version 6)"),
              std::string::npos)
        << error(file);
  }
  const std::string cut = error(good.substr(0, good.size() - 3));
  EXPECT_NE(cut.find("truncated"), std::string::npos) << cut;
  EXPECT_NE(cut.find("file has 37 bytes, header says 40"), std::string::npos)
      << cut;
  EXPECT_NE(error(good.substr(0, 20)).find("truncated"), std::string::npos);
  EXPECT_NE(error(good + "x").find("trailing"), std::string::npos);
  std::string flip = good;
  flip[35] ^= 0x10;
  EXPECT_NE(error(flip).find("checksum mismatch"), std::string::npos);
  EXPECT_NE(error(flip).find("corrupt"), std::string::npos);
}

TEST(ProgramLoader, MissingFileAndNotAFlatBuffer) {
  fb::LoadedProgram loaded;
  Status s = fb::loadProgramFile("/nonexistent/prog.loom", loaded);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/prog.loom"), std::string::npos);
  s = fb::loadProgramFile("/tmp", loaded);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos);

  // A valid envelope around bytes that are not a Loom FlatBuffer.
  const std::string junk(64, 'x');
  s = fb::loadProgramBytes(
      fb::encodeProgramFile(reinterpret_cast<const uint8_t *>(junk.data()),
                            junk.size()),
      "junk.loom", loaded);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a Loom program FlatBuffer"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(loaded.root(), nullptr);
}

TEST(ProgramLoader, ValidProgramLoadsFromFile) {
  auto p = miniGpt();
  const std::string path = ::testing::TempDir() + "/loader_valid.loom";
  std::string bytes = serialize(*p);
  std::FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_TRUE(f);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  fb::LoadedProgram loaded;
  Status s = fb::loadProgramFile(path, loaded);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_NE(loaded.root(), nullptr);
  ASSERT_NE(loaded.stage(0), nullptr);
  EXPECT_EQ(loaded.stage(1), nullptr);
  EXPECT_EQ(loaded.stage(0)->instructions()->size(), 15u);
  std::remove(path.c_str());
}

//===----------------------------------------------------------------------===//
// Program-level rules
//===----------------------------------------------------------------------===//

TEST(ProgramVerifier, ProgramLevel) {
  expectRejected([](fb::ProgramT &p) { p.stages.clear(); }, {"no stages"});
  expectRejected([](fb::ProgramT &p) { p.model.reset(); }, {"no model info"});
  expectRejected([](fb::ProgramT &p) { p.model->batch = 0; },
                 {"batch = 0", "positive"});
  expectRejected([](fb::ProgramT &p) { p.model->vocab_size = -3; },
                 {"vocab_size"});
  expectRejected([](fb::ProgramT &p) { p.format_version = 9; },
                 {"format_version 9"});
  expectRejected(
      [](fb::ProgramT &p) {
        p.stages.push_back(std::make_unique<fb::StageT>());
        p.stages[1]->index = 0;
      },
      {"repeats stage index 0"});
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

TEST(ProgramVerifier, Buffers) {
  expectRejected([](fb::ProgramT &p) { stage0(p).arena_bytes -= 64; },
                 {"stage 0, buffer #", "'loss'", "leave the arena"});
  expectRejected([](fb::ProgramT &p) { stage0(p).buffers[3]->offset += 32; },
                 {"buffer #3", "not aligned to 64"});
  expectRejected([](fb::ProgramT &p) { stage0(p).buffers[2]->shape[0] = 0; },
                 {"buffer #2", "not positive"});
  expectRejected([](fb::ProgramT &p) { stage0(p).buffers[2]->shape[0] = -4; },
                 {"not positive"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[2]->shape = {1ll << 40, 1ll << 40};
      },
      {"too many elements"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[2]->dtype = static_cast<fb::DType>(9);
      },
      {"unknown dtype 9"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[0]->offset = 0xffffffffffffffc0ull;
      },
      {"leave the arena"});
}

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

TEST(ProgramVerifier, OperandIndicesAndCounts) {
  expectRejected([](fb::ProgramT &p) { instr(p, "h.0.ln_1").inputs[0] = 999; },
                 {"stage 0, instruction #2 'h.0.ln_1' (LayerNorm)",
                  "input #0 is buffer 999"});
  expectRejected([](fb::ProgramT &p) { instr(p, "h.0.attn").outputs.clear(); },
                 {"instruction #4 'h.0.attn'", "1 to 2 outputs, got 0"});
  expectRejected(
      [](fb::ProgramT &p) { instr(p, "h.0.mlp.gelu").inputs.push_back(0); },
      {"Gelu takes 1 inputs, got 2"});
  expectRejected(
      [](fb::ProgramT &p) { instr(p, "h.0.attn").scratch.push_back(3); },
      {"at most 1 scratch"});
  expectRejected(
      [](fb::ProgramT &p) {
        auto &ins = instr(p, "h.0.attn");
        ins.scratch[0] = ins.inputs[0];
      },
      {"overlaps input"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).instructions[0]->opcode = static_cast<fb::Opcode>(31);
      },
      {"instruction #0", "unknown opcode 31"});
}

TEST(ProgramVerifier, Predictions) {
  // Optional (hand-built programs have none); byte counts never negative.
  EXPECT_TRUE(load(*miniGpt()).ok());
  auto p = miniGpt();
  setPredictions(stage0(*p), 0, {0, 0, 0, 0, 0});
  EXPECT_TRUE(load(*p).ok());
  setPredictions(stage0(*p), 1 << 20, {10, 20, 30, 40, 50});
  EXPECT_TRUE(load(*p).ok());
  expectRejected(
      [](fb::ProgramT &p) {
        setPredictions(stage0(p), -1, {0, 0, 0, 0, 0});
      },
      {"stage 0: predicted model_state_bytes -1 is negative"});
  const char *kinds[] = {"all_reduce", "all_gather", "reduce_scatter",
                         "all_to_all", "send"};
  for (int k = 0; k < 5; ++k) {
    std::vector<int64_t> sent(5, 8);
    sent[k] = -8;
    expectRejected(
        [&](fb::ProgramT &p) { setPredictions(stage0(p), 64, sent); },
        {std::string("stage 0: predicted sent_bytes_per_step.") + kinds[k] +
         " -8 is negative"});
  }
  expectRejected(
      [](fb::ProgramT &p) {
        setPredictions(stage0(p), 64, {0, 0, 0, 0, 0});
        stage0(p).predictions->sent_bytes_per_step.reset();
      },
      {"stage 0: predictions have no sent_bytes_per_step"});
}

TEST(ProgramVerifier, OpcodesThisRuntimeCannotRun) {
  // Opcodes between the vocab-parallel loss (CrossEntropySumsGrad = 30)
  // and the collectives are not in the schema.
  for (unsigned v = 31; v < 32; ++v) {
    auto p = miniGpt();
    stage0(*p).instructions[3]->opcode = static_cast<fb::Opcode>(v);
    Status s = load(*p);
    ASSERT_FALSE(s.ok()) << v;
    const char *name = fb::EnumNameOpcode(static_cast<fb::Opcode>(v));
    const std::string want = (name && *name)
                                 ? std::string("program uses ") + name +
                                       ", which this runtime cannot run yet"
                                 : "unknown opcode " + std::to_string(v);
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("instruction #3 'h.0.attn.c_attn'"),
              std::string::npos)
        << s.message();
  }
}

TEST(ProgramVerifier, Dtypes) {
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[instr(p, "wte").inputs[1]]->dtype = fb::DType::F32;
      },
      {"'wte' (Embedding)", "ids", "must be I32, got F32"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[instr(p, "h.0.mlp.gelu").outputs[0]]->dtype =
            fb::DType::I32;
      },
      {"result", "must be F32 or BF16, got I32"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[instr(p, "loss").inputs[1]]->dtype = fb::DType::F32;
      },
      {"targets", "must be I32"});
}

TEST(ProgramVerifier, ComputeShapes) {
  // Embedding: table [V, C], out = ids.shape + [C].
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[instr(p, "wte").outputs[0]]->shape = {2, 8, 15};
      },
      {"'wte' (Embedding)", "expected [2, 8, 16]"});
  // Add: rhs a trailing suffix of lhs.
  expectRejected(
      [](fb::ProgramT &p) {
        auto &a = instr(p, "wpe");
        std::swap(a.inputs[0], a.inputs[1]);
      },
      {"'wpe' (Add)", "trailing dimensions"});
  // Linear: K matches, bias [N], out [..., N].
  expectRejected(
      [](fb::ProgramT &p) {
        auto &l = instr(p, "h.0.mlp.c_fc");
        l.inputs[0] = instr(p, "h.0.mlp.gelu").outputs[0];
      },
      {"'h.0.mlp.c_fc' (Linear)", "input features 64"});
  expectRejected(
      [](fb::ProgramT &p) {
        auto &l = instr(p, "h.0.mlp.c_fc");
        l.inputs[2] = instr(p, "h.0.attn.c_proj").inputs[2];
      },
      {"bias", "expected [64]"});
  // Matmul: K of the (transposed) rhs.
  expectRejected(
      [](fb::ProgramT &p) { instr(p, "lm_head").transpose_rhs = false; },
      {"'lm_head' (Matmul)", "contracting dimensions differ"});
  // LayerNorm: epsilon, weight, scratch rows.
  expectRejected([](fb::ProgramT &p) { instr(p, "ln_f").epsilon = 0.0; },
                 {"'ln_f' (LayerNorm)", "epsilon must be in (0, 1)"});
  expectRejected([](fb::ProgramT &p) { instr(p, "ln_f").epsilon = 1.5; },
                 {"epsilon"});
  expectRejected(
      [](fb::ProgramT &p) {
        auto &l = instr(p, "ln_f");
        l.inputs[1] = instr(p, "h.0.mlp.c_fc").inputs[2];
      },
      {"weight", "expected [16]"});
  expectRejected(
      [](fb::ProgramT &p) {
        auto &l = instr(p, "h.0.ln_1");
        l.scratch.pop_back();
      },
      {"scratch must be empty or [mean, rstd]"});
  expectRejected(
      [](fb::ProgramT &p) {
        auto &l = instr(p, "h.0.ln_1");
        stage0(p).buffers[l.scratch[1]]->shape = {15};
      },
      {"scratch (mean / rstd)", "expected 16"});
  // Gelu / softmax: out = in.
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[instr(p, "h.0.mlp.gelu").outputs[0]]->shape = {16,
                                                                         64};
      },
      {"'h.0.mlp.gelu' (Gelu)", "expected [2, 8, 64]"});
  // Attention: heads divide C, scratch the row statistics B*NH*T (F32).
  expectRejected([](fb::ProgramT &p) { instr(p, "h.0.attn").num_heads = 3; },
                 {"'h.0.attn' (Attention)", "not divisible by num_heads 3"});
  expectRejected([](fb::ProgramT &p) { instr(p, "h.0.attn").num_heads = 0; },
                 {"num_heads must be positive"});
  expectRejected([](fb::ProgramT &p) { instr(p, "h.0.attn").num_heads = 4; },
                 {"scratch (row stats) has 32 elements, expected B*NH*T = 2*4*8"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[instr(p, "h.0.attn").scratch[0]]->dtype =
            fb::DType::I32;
      },
      {"scratch (row stats)", "must be F32 or BF16"});
  // Cross entropy: targets = logits minus last dim, scalar out, losses [N].
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[instr(p, "loss").inputs[1]]->shape = {16};
      },
      {"'loss' (CrossEntropy)", "targets", "expected [2, 8]"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[instr(p, "loss").outputs[0]]->shape = {2};
      },
      {"scalar loss"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[instr(p, "loss").scratch[0]]->shape = {8};
      },
      {"per-token losses", "expected 16"});
}

/// A program with one data-movement instruction from [2, 3, 4] to `outShape`.
std::unique_ptr<fb::ProgramT> movement(fb::Opcode op,
                                       std::vector<int64_t> outShape,
                                       fb::DType outType = fb::DType::F32) {
  auto p = emptyProgram(2, 3, 10);
  StageBuilder s(*p->stages[0]);
  const uint32_t a = s.buffer("a", {2, 3, 4});
  const uint32_t b = s.buffer("b", outShape, outType);
  s.op(op, "move", {a}, {b});
  return p;
}

TEST(ProgramVerifier, MovementShapes) {
  EXPECT_TRUE(load(*movement(fb::Opcode::Copy, {6, 4})).ok());
  Status s = load(*movement(fb::Opcode::Copy, {6, 5}));
  EXPECT_NE(s.message().find("'move' (Copy)"), std::string::npos)
      << s.message();
  s = load(*movement(fb::Opcode::Copy, {24}, fb::DType::I32));
  EXPECT_NE(s.message().find("no conversion"), std::string::npos);

  auto t = movement(fb::Opcode::Transpose, {4, 2, 3});
  t->stages[0]->instructions[0]->permutation = {2, 0, 1};
  EXPECT_TRUE(load(*t).ok()) << load(*t).toString();
  t->stages[0]->instructions[0]->permutation = {2, 2, 1};
  s = load(*t);
  EXPECT_NE(s.message().find("not a permutation"), std::string::npos);
  t->stages[0]->instructions[0]->permutation = {0, 2, 1};
  s = load(*t);
  EXPECT_NE(s.message().find("expected [2, 4, 3]"), std::string::npos)
      << s.message();

  auto sl = movement(fb::Opcode::Slice, {2, 2, 4});
  sl->stages[0]->instructions[0]->dim = 1;
  sl->stages[0]->instructions[0]->offset = 1;
  EXPECT_TRUE(load(*sl).ok());
  sl->stages[0]->instructions[0]->offset = 2;
  s = load(*sl);
  EXPECT_NE(s.message().find("out of bounds"), std::string::npos);
  sl->stages[0]->instructions[0]->dim = 3;
  s = load(*sl);
  EXPECT_NE(s.message().find("dim 3 is out of range"), std::string::npos);

  auto c = emptyProgram(2, 3, 10);
  StageBuilder cs(*c->stages[0]);
  const uint32_t a = cs.buffer("a", {2, 3});
  const uint32_t b = cs.buffer("b", {2, 5});
  const uint32_t o = cs.buffer("o", {2, 8});
  cs.op(fb::Opcode::Concat, "cat", {a, b}, {o}).dim = 1;
  EXPECT_TRUE(load(*c).ok());
  c->stages[0]->arena_bytes += 1024; // room for the wrong shapes below
  c->stages[0]->buffers[o]->shape = {2, 9};
  s = load(*c);
  EXPECT_NE(s.message().find("inputs add up to 8"), std::string::npos)
      << s.message();
  c->stages[0]->buffers[o]->shape = {3, 8};
  s = load(*c);
  EXPECT_NE(s.message().find("differs from the result"), std::string::npos);
}

TEST(ProgramVerifier, CollectivesNeedAMesh) {
  for (fb::Opcode op :
       {fb::Opcode::AllReduce, fb::Opcode::AllGather, fb::Opcode::ReduceScatter,
        fb::Opcode::AllToAll, fb::Opcode::Send, fb::Opcode::Recv}) {
    auto p = miniGpt();
    auto &ins = stage0(*p).instructions[6];
    ins->opcode = op;
    ins->name = "grad.sync";
    Status s = load(*p);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("instruction #6 'grad.sync' (" +
                               fb::opcodeName(op) +
                               "): collectives need a device mesh"),
              std::string::npos)
        << s.message();
  }
}

namespace {
/// The mesh dp = 2, tp = 2.
void addDpTpMesh(fb::ProgramT &p) {
  for (auto [name, size] : {std::pair<const char *, int64_t>{"dp", 2},
                            {"tp", 2}}) {
    auto a = std::make_unique<fb::MeshAxisT>();
    a->name = name;
    a->size = size;
    p.mesh.push_back(std::move(a));
  }
}

/// miniGpt() on mesh dp=2, tp=2 (tokens hold batch / dp rows) plus one
/// collective `op` from buffer `in` to a new buffer of shape `outShape`.
std::unique_ptr<fb::ProgramT> withCollective(fb::Opcode op,
                                             std::vector<int64_t> inShape,
                                             std::vector<int64_t> outShape,
                                             std::vector<uint32_t> axes,
                                             int64_t dim = 0,
                                             int64_t dim2 = 0) {
  auto p = miniGpt();
  p->model->batch = 4; // tokens [2, T] = batch / dp
  addDpTpMesh(*p);
  StageBuilder s(stage0(*p));
  const uint32_t in = s.buffer("c.in", inShape);
  std::vector<uint32_t> ins = {in}, outs;
  if (op != fb::Opcode::Send)
    outs.push_back(s.buffer("c.out", outShape));
  if (op == fb::Opcode::Recv)
    ins.clear();
  auto &i = s.op(op, "c", ins, outs);
  i.axes = axes;
  i.dim = dim;
  i.dim2 = dim2;
  return p;
}
} // namespace

TEST(ProgramVerifier, CollectiveShapes) {
  using O = fb::Opcode;
  // Accepted.
  EXPECT_TRUE(load(*withCollective(O::AllReduce, {4, 6}, {4, 6}, {0, 1})).ok());
  EXPECT_TRUE(load(*withCollective(O::AllGather, {4, 6}, {4, 12}, {1}, 1)).ok());
  EXPECT_TRUE(
      load(*withCollective(O::AllGather, {4, 6}, {16, 6}, {0, 1}, 0)).ok());
  EXPECT_TRUE(
      load(*withCollective(O::ReduceScatter, {4, 6}, {4, 3}, {0}, 1)).ok());
  EXPECT_TRUE(
      load(*withCollective(O::AllToAll, {4, 6}, {2, 12}, {1}, 0, 1)).ok());
  EXPECT_TRUE(load(*withCollective(O::Send, {4}, {}, {1})).ok());
  EXPECT_TRUE(load(*withCollective(O::Recv, {}, {4}, {1})).ok());
  // Rejected.
  auto expectError = [](std::unique_ptr<fb::ProgramT> p,
                        const std::string &needle) {
    Status s = load(*p);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expectError(withCollective(O::AllReduce, {4, 6}, {4, 7}, {0}),
              "result (buffer");
  expectError(withCollective(O::AllReduce, {4}, {4}, {2}),
              "axis 2 is out of range (the mesh has 2 axes)");
  expectError(withCollective(O::AllReduce, {4}, {4}, {1, 1}),
              "axis 1 appears twice");
  expectError(withCollective(O::AllReduce, {4}, {4}, {}), "names no mesh axes");
  expectError(withCollective(O::AllGather, {4, 6}, {4, 6}, {1}, 1),
              "expected [4, 12]");
  expectError(withCollective(O::AllGather, {4, 6}, {4, 12}, {1}, 2),
              "dim 2 is out of range");
  expectError(withCollective(O::ReduceScatter, {4, 5}, {4, 2}, {0}, 1),
              "not divisible by the group size 2");
  expectError(withCollective(O::AllToAll, {4, 6}, {4, 6}, {0, 1}, 0, 1),
              "expected [1, 24]");
  expectError(withCollective(O::Send, {4}, {}, {0, 1}),
              "exactly one mesh axis");
  {
    auto p = withCollective(O::Send, {4}, {}, {1});
    stage0(*p).instructions.back()->peer = 2;
    expectError(std::move(p), "peer 2 is out of range for axis 1 of size 2");
  }
  {
    auto p = withCollective(O::AllReduce, {4}, {4}, {0});
    stage0(*p).instructions.back()->reduction = fb::Reduction::Avg;
    EXPECT_TRUE(load(*p).ok());
  }
  // Tokens hold batch / dp / microbatches rows.
  {
    auto p = withCollective(O::AllReduce, {4}, {4}, {0});
    p->model->batch = 2;
    expectError(std::move(p), "batch / microbatches / dp x seq");
  }
  // Asynchronous: an all-reduce, an all-gather or a reduce-scatter, which
  // packs a non-leading split into a scratch buffer of its own while in
  // flight (a leading one sends from its input).
  {
    auto p = withCollective(O::ReduceScatter, {4, 6}, {2, 6}, {0}, 0);
    stage0(*p).instructions.back()->async_collective = true;
    EXPECT_TRUE(load(*p).ok());
  }
  auto asyncScatter = [&](std::vector<int64_t> scratchShape) {
    auto p = withCollective(O::ReduceScatter, {4, 6}, {4, 3}, {0}, 1);
    StageBuilder b(stage0(*p));
    fb::InstructionT &rs = *stage0(*p).instructions.back();
    rs.async_collective = true;
    if (!scratchShape.empty())
      rs.scratch = {b.buffer("c.packed", scratchShape)};
    return p;
  };
  EXPECT_TRUE(load(*asyncScatter({24})).ok());
  expectError(asyncScatter({}),
              "an asynchronous ReduceScatter of dimension 1 of [4, 6] needs 1 "
              "scratch buffers (its packed input), got 0");
  expectError(asyncScatter({12}), "the ReduceScatter's packed-input scratch "
                                  "buffer has 48 bytes, but needs 96");
  // Synchronous: a non-leading split goes through its planned scratch, or
  // the runtime's workspace in a program without one; a leading one needs
  // none.
  auto withScratch = [&](O op, std::vector<int64_t> inShape,
                         std::vector<int64_t> outShape, int64_t dim,
                         int64_t dim2,
                         std::vector<std::vector<int64_t>> scratchShapes) {
    auto p = withCollective(op, inShape, outShape, {0}, dim, dim2);
    StageBuilder b(stage0(*p));
    fb::InstructionT &c = *stage0(*p).instructions.back();
    for (const auto &shape : scratchShapes)
      c.scratch.push_back(b.buffer("c.scratch", shape));
    return p;
  };
  EXPECT_TRUE(
      load(*withScratch(O::ReduceScatter, {4, 6}, {4, 3}, 1, 0, {{24}})).ok());
  expectError(withScratch(O::ReduceScatter, {4, 6}, {2, 6}, 0, 0, {{24}}),
              "a ReduceScatter of dimension 0 of [4, 6] needs 0 scratch "
              "buffers, got 1");
  expectError(withScratch(O::ReduceScatter, {4, 6}, {4, 3}, 1, 0, {{24}, {24}}),
              "a ReduceScatter of dimension 1 of [4, 6] needs 1 scratch "
              "buffers (its packed input) or none, got 2");
  // An AllGather of a non-leading dim receives every rank's blocks into
  // one buffer of the gathered size, then unpacks them.
  for (bool async : {false, true}) {
    auto p = withScratch(O::AllGather, {4, 6}, {4, 12}, 1, 0, {{48}});
    stage0(*p).instructions.back()->async_collective = async;
    Status s = load(*p);
    EXPECT_TRUE(s.ok()) << s.toString();
  }
  expectError(withScratch(O::AllGather, {4, 6}, {4, 12}, 1, 0, {{24}}),
              "the AllGather's gathered-blocks scratch buffer has 96 bytes, "
              "but needs 192");
  expectError(withScratch(O::AllGather, {4, 6}, {8, 6}, 0, 0, {{48}}),
              "an AllGather of dimension 0 of [4, 6] needs 0 scratch buffers, "
              "got 1");
  {
    auto p = withCollective(O::AllGather, {4, 6}, {4, 12}, {0}, 1);
    StageBuilder b(stage0(*p));
    stage0(*p).instructions.back()->scratch = {
        b.buffer("c.scratch", {96}, fb::DType::BF16)};
    expectError(std::move(p), "must be F32, got BF16");
  }
  // An AllToAll packs a non-leading split dim and receives a concat dim
  // that is not leading in a block: both, or neither.
  EXPECT_TRUE(
      load(*withScratch(O::AllToAll, {4, 6}, {8, 3}, 1, 0, {{24}})).ok());
  EXPECT_TRUE(
      load(*withScratch(O::AllToAll, {4, 6}, {2, 12}, 0, 1, {{24}})).ok());
  EXPECT_TRUE(load(*withScratch(O::AllToAll, {2, 4, 6}, {2, 8, 3}, 2, 1,
                                {{48}, {48}}))
                  .ok());
  expectError(withScratch(O::AllToAll, {2, 4, 6}, {2, 8, 3}, 2, 1, {{48}}),
              "needs 2 scratch buffers (its packed input and received "
              "blocks) or none, got 1");
  expectError(withScratch(O::AllToAll, {4, 6}, {2, 12}, 0, 1, {{12}}),
              "the AllToAll's received-blocks scratch buffer has 48 bytes, "
              "but needs 96");
  // In place (ZeRO-1's last-micro-batch reduce-scatter of an accumulator):
  // output 0 is input 0, scratch[0] the received block, scratch[1] the
  // packed input of a non-leading dim; only in a training stage.
  auto inPlaceScatter = [&](int64_t dim, std::vector<std::vector<int64_t>>
                                             scratchShapes,
                            bool training = true) {
    auto p = emptyProgram(2, 4, 16);
    addDpTpMesh(*p);
    StageBuilder b(stage0(*p));
    const uint32_t acc = b.buffer("acc", {4, 6});
    std::vector<uint32_t> scratch;
    for (const auto &shape : scratchShapes)
      scratch.push_back(b.buffer("s", shape));
    auto &rs = b.op(O::ReduceScatter, "rs", {acc}, {acc}, scratch);
    rs.axes = {0};
    rs.dim = dim;
    rs.last_microbatch_only = true;
    if (training)
      makeMinimalTrainingStage(b);
    return p;
  };
  {
    Status s = load(*inPlaceScatter(0, {{12}}));
    EXPECT_TRUE(s.ok()) << s.toString();
    s = load(*inPlaceScatter(1, {{12}, {24}}));
    EXPECT_TRUE(s.ok()) << s.toString();
  }
  expectError(inPlaceScatter(0, {}),
              "a last-micro-batch (in-place) ReduceScatter of dimension 0 of "
              "[4, 6] needs 1 scratch buffers (its received block), got 0");
  expectError(inPlaceScatter(1, {{12}}),
              "needs 2 scratch buffers (its received block and packed "
              "input), got 1");
  expectError(inPlaceScatter(0, {{6}}),
              "the ReduceScatter's received-block scratch buffer has 24 "
              "bytes, but needs 48");
  expectError(inPlaceScatter(0, {{12}}, /*training=*/false),
              "last_microbatch_only belongs in the instructions of a "
              "training stage");
  {
    // The received block holds the input's dtype.
    auto p = inPlaceScatter(0, {{12}});
    fb::StageT &st = stage0(*p);
    st.buffers[st.instructions.back()->scratch[0]]->dtype = fb::DType::BF16;
    Status s = load(*p);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("scratch"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("BF16"), std::string::npos) << s.message();
  }
  {
    auto p = inPlaceScatter(0, {{12}});
    StageBuilder b(stage0(*p));
    fb::InstructionT &rs = *stage0(*p).instructions.back();
    rs.outputs = {b.buffer("other", {4, 6})};
    expectError(std::move(p), "a last-micro-batch ReduceScatter reduces in "
                              "place, but output buffer");
  }
  {
    auto p = inPlaceScatter(0, {{12}});
    StageBuilder b(stage0(*p));
    fb::InstructionT &rs = *stage0(*p).instructions.back();
    rs.scratch = {rs.inputs[0]};
    expectError(std::move(p), "scratch #0 (buffer 0) overlaps input buffer 0");
  }
  {
    auto p = inPlaceScatter(0, {});
    StageBuilder b(stage0(*p));
    fb::InstructionT &ag = *stage0(*p).instructions.back();
    ag.opcode = O::AllGather;
    ag.outputs = {b.buffer("gathered", {8, 6})};
    expectError(std::move(p), "only AllReduce and ReduceScatter may run in "
                              "the last micro-batch only, not AllGather");
  }
  {
    auto p = withCollective(O::AllToAll, {4, 6}, {2, 12}, {1}, 0, 1);
    stage0(*p).instructions.back()->async_collective = true;
    expectError(std::move(p), "only AllReduce, AllGather and ReduceScatter may "
                              "be asynchronous, not AllToAll");
  }
}

TEST(ProgramVerifier, CollectiveBuckets) {
  // ZeRO-2/3's buckets over dp (2) on dim 0. A ReduceScatter of [4, 6] and
  // [6] into [2, 6] and [3], scratch[0] this rank's received blocks (15
  // floats), scratch[1] the packed inputs (30); an AllGather of [2, 6] and
  // [3] into [4, 6] and [6], scratch[0] this rank's packed shards (15),
  // scratch[1] every rank's (30).
  using O = fb::Opcode;
  struct Case {
    O op = O::ReduceScatter;
    std::vector<std::vector<int64_t>> outs;
    std::vector<std::vector<int64_t>> scratch = {{15}, {30}};
    fb::DType secondDType = fb::DType::F32;
    bool lastMicrobatch = false;
  };
  auto bucket = [](const Case &c) {
    const bool scatter = c.op == O::ReduceScatter;
    const std::vector<std::vector<int64_t>> big = {{4, 6}, {6}},
                                            small = {{2, 6}, {3}};
    const auto &inShapes = scatter ? big : small;
    const auto &outShapes = c.outs.empty() ? (scatter ? small : big) : c.outs;
    auto p = emptyProgram(2, 4, 16);
    addDpTpMesh(*p);
    StageBuilder b(stage0(*p));
    std::vector<uint32_t> ins, outs, scratch;
    for (size_t k = 0; k < inShapes.size(); ++k)
      ins.push_back(b.buffer("in", inShapes[k],
                             k == 1 ? c.secondDType : fb::DType::F32));
    for (size_t k = 0; k < outShapes.size(); ++k)
      outs.push_back(b.buffer("out", outShapes[k],
                              k == 1 ? c.secondDType : fb::DType::F32));
    for (const auto &shape : c.scratch)
      scratch.push_back(b.buffer("scratch", shape));
    auto &i = b.op(c.op, "bucket", ins, outs, scratch);
    i.axes = {0};
    i.dim = 0;
    i.async_collective = true;
    i.last_microbatch_only = c.lastMicrobatch;
    if (c.lastMicrobatch)
      makeMinimalTrainingStage(b);
    return p;
  };
  auto expectError = [&](const Case &c, const std::string &needle) {
    Status s = load(*bucket(c));
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  for (O op : {O::ReduceScatter, O::AllGather}) {
    const bool scatter = op == O::ReduceScatter;
    const std::string name = scatter ? "ReduceScatter" : "AllGather";
    SCOPED_TRACE(name);
    {
      Case ok;
      ok.op = op;
      Status s = load(*bucket(ok));
      EXPECT_TRUE(s.ok()) << s.toString();
    }
    Case c;
    c.op = op;
    c.scratch = {{15}};
    expectError(c, "a " + name + " of 2 values needs 2 scratch buffers (its " +
                       (scatter ? "received blocks and packed inputs"
                                : "packed shards and gathered shards") +
                       "), got 1");
    c.scratch = {{14}, {30}};
    expectError(c, "the " + name + " bucket's " +
                       (scatter ? "received-blocks" : "packed-shards") +
                       " scratch buffer has 56 bytes, but needs 60");
    c.scratch = {{15}, {29}};
    expectError(c, "the " + name + " bucket's " +
                       (scatter ? "packed-inputs" : "gathered-shards") +
                       " scratch buffer has 116 bytes, but needs 120");
    c = {};
    c.op = op;
    c.outs = {{scatter ? 2 : 4, 6}, {scatter ? 6 : 3}};
    expectError(c, "result (buffer");
    c = {};
    c.op = op;
    c.secondDType = fb::DType::BF16;
    expectError(c, "bucket input");
    c = {};
    c.op = op;
    c.outs = {{scatter ? 2 : 4, 6}};
    expectError(c, name + " has 2 output(s), got 1");
    {
      // An output on a scratch buffer's bytes, and the two scratch buffers
      // on the same bytes, would unpack what is still arriving.
      Case ok;
      ok.op = op;
      auto p = bucket(ok);
      fb::InstructionT &i = *stage0(*p).instructions.back();
      i.outputs[1] = i.scratch[0];
      Status s = load(*p);
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.message().find("overlaps"), std::string::npos)
          << s.message();
      p = bucket(ok);
      fb::InstructionT &i2 = *stage0(*p).instructions.back();
      i2.scratch[1] = i2.scratch[0];
      s = load(*p);
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.message().find("overlap"), std::string::npos)
          << s.message();
    }
  }
  {
    // ZeRO-1's bucket in the last micro-batch reduces in place: each output
    // is its input ([4, 6] and [6] again), the same two scratch buffers.
    auto inPlace = [](bool sameBuffers) {
      auto p = emptyProgram(2, 4, 16);
      addDpTpMesh(*p);
      StageBuilder b(stage0(*p));
      std::vector<uint32_t> ins = {b.buffer("acc0", {4, 6}),
                                   b.buffer("acc1", {6})};
      std::vector<uint32_t> outs =
          sameBuffers ? ins
                      : std::vector<uint32_t>{b.buffer("out0", {4, 6}),
                                              b.buffer("out1", {6})};
      auto &i = b.op(O::ReduceScatter, "bucket", ins, outs,
                     {b.buffer("scratch", {15}), b.buffer("scratch", {30})});
      i.axes = {0};
      i.async_collective = true;
      i.last_microbatch_only = true;
      makeMinimalTrainingStage(b);
      return p;
    };
    Status s = load(*inPlace(true));
    EXPECT_TRUE(s.ok()) << s.toString();
    s = load(*inPlace(false));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("a last-micro-batch ReduceScatter bucket "
                               "reduces in place, but output buffer"),
              std::string::npos)
        << s.message();
  }
  Case c;
  c.lastMicrobatch = true;
  // Results of the reduced shape: not in place.
  expectError(c, "result (buffer");
  {
    // Not divisible: a [5] member over 2 ranks.
    auto p = bucket({});
    fb::StageT &st = stage0(*p);
    st.buffers[st.instructions.back()->inputs[1]]->shape = {5};
    Status s = load(*p);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("is not divisible by the group size 2"),
              std::string::npos)
        << s.message();
  }
}

TEST(ProgramVerifier, CollectiveBucketMemberDims) {
  // A bucket whose members split different dimensions over dp (2), as
  // GPT-2's c_attn.bias beside the block's weights: member_dims {1, 0}.
  // A ReduceScatter of [4, 6] (dim 1) and [6] (dim 0) into [4, 3] and [3];
  // an AllGather of those back. Each member's shape is checked against its
  // own dimension; member_dims belongs to buckets alone, one per input.
  using O = fb::Opcode;
  auto bucket = [](O op, std::vector<int64_t> memberDims,
                   std::vector<std::vector<int64_t>> outs = {}) {
    const bool scatter = op == O::ReduceScatter;
    const std::vector<std::vector<int64_t>> big = {{4, 6}, {6}},
                                            small = {{4, 3}, {3}};
    const auto &inShapes = scatter ? big : small;
    const auto &outShapes = outs.empty() ? (scatter ? small : big) : outs;
    auto p = emptyProgram(2, 4, 16);
    addDpTpMesh(*p);
    StageBuilder b(stage0(*p));
    std::vector<uint32_t> ins, outBuffers;
    for (const auto &shape : inShapes)
      ins.push_back(b.buffer("in", shape));
    for (const auto &shape : outShapes)
      outBuffers.push_back(b.buffer("out", shape));
    auto &i = b.op(op, "bucket", ins, outBuffers,
                   {b.buffer("scratch", {15}), b.buffer("scratch", {30})});
    i.axes = {0};
    i.dim = memberDims.empty() ? 0 : memberDims[0];
    i.member_dims = std::move(memberDims);
    return p;
  };
  auto expectError = [](const fb::ProgramT &p, const std::string &needle) {
    Status s = load(p);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  for (O op : {O::ReduceScatter, O::AllGather}) {
    const bool scatter = op == O::ReduceScatter;
    SCOPED_TRACE(scatter ? "ReduceScatter" : "AllGather");
    Status s = load(*bucket(op, {1, 0}));
    EXPECT_TRUE(s.ok()) << s.toString();
    // Without member_dims every member splits `dim` (1): [6] has no dim 1.
    expectError(*bucket(op, {}), "result (buffer");
    expectError(*bucket(op, {2, 0}), "dim 2 is out of range for rank 2");
    // The results of dim-0 splits under member_dims {1, 0}.
    expectError(*bucket(op, {1, 0},
                        scatter ? std::vector<std::vector<int64_t>>{{2, 6}, {3}}
                                : std::vector<std::vector<int64_t>>{{8, 3},
                                                                    {6}}),
                "result (buffer");
    expectError(*bucket(op, {1}),
                "member_dims (1 dimensions) belong to an AllGather or "
                "ReduceScatter bucket, one per input; this " +
                    std::string(scatter ? "ReduceScatter" : "AllGather") +
                    " has 2 inputs");
  }
  // Not on a single value, nor on another collective.
  auto single = emptyProgram(2, 4, 16);
  addDpTpMesh(*single);
  {
    StageBuilder b(stage0(*single));
    auto &i = b.op(O::AllGather, "gather", {b.buffer("in", {2, 6})},
                   {b.buffer("out", {4, 6})});
    i.axes = {0};
    i.member_dims = {0};
  }
  expectError(*single, "this AllGather has 1 inputs");
  auto reduce = emptyProgram(2, 4, 16);
  addDpTpMesh(*reduce);
  {
    StageBuilder b(stage0(*reduce));
    uint32_t x = b.buffer("x", {4}), y = b.buffer("y", {4});
    auto &i = b.op(O::AllReduce, "reduce", {x, y}, {x, y},
                   {b.buffer("scratch", {8})});
    i.axes = {0};
    i.member_dims = {0, 0};
  }
  expectError(*reduce, "this AllReduce has 2 inputs");
}

TEST(ProgramVerifier, Wait) {
  // A point where the collectives in flight on its inputs complete: one or
  // more inputs, nothing written.
  using O = fb::Opcode;
  auto waitOn = [](size_t inputs, size_t outputs, size_t scratch) {
    auto p = emptyProgram(2, 4, 16);
    StageBuilder b(stage0(*p));
    std::vector<uint32_t> ins, outs, scr;
    for (size_t k = 0; k < inputs; ++k)
      ins.push_back(b.buffer("in", {4}));
    for (size_t k = 0; k < outputs; ++k)
      outs.push_back(b.buffer("out", {4}));
    for (size_t k = 0; k < scratch; ++k)
      scr.push_back(b.buffer("scratch", {4}));
    b.op(O::Wait, "wait", ins, outs, scr);
    return p;
  };
  for (size_t n : {1, 3}) {
    Status s = load(*waitOn(n, 0, 0));
    EXPECT_TRUE(s.ok()) << s.toString();
  }
  auto expectError = [](std::unique_ptr<fb::ProgramT> p,
                        const std::string &needle) {
    Status s = load(*p);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expectError(waitOn(0, 0, 0), "Wait takes 1 or more inputs, got 0");
  expectError(waitOn(1, 1, 0), "Wait has 0 output(s), got 1");
  expectError(waitOn(1, 0, 1), "Wait takes at most 0 scratch buffers, got 1");
}

TEST(ProgramVerifier, LocalSliceShapes) {
  using O = fb::Opcode;
  EXPECT_FALSE(fb::isCollective(O::LocalSlice));
  EXPECT_TRUE(
      load(*withCollective(O::LocalSlice, {4, 6}, {2, 6}, {0}, 0)).ok());
  EXPECT_TRUE(
      load(*withCollective(O::LocalSlice, {4, 6}, {4, 3}, {1}, 1)).ok());
  EXPECT_TRUE(
      load(*withCollective(O::LocalSlice, {4, 8}, {4, 2}, {1, 0}, 1)).ok());
  {
    auto p = withCollective(O::LocalSlice, {4, 6}, {1, 6}, {0, 1}, 0);
    auto &bufs = stage0(*p).buffers;
    bufs[bufs.size() - 2]->dtype = fb::DType::I32;
    bufs[bufs.size() - 1]->dtype = fb::DType::I32;
    EXPECT_TRUE(load(*p).ok());
    bufs[bufs.size() - 1]->dtype = fb::DType::F32;
    Status s = load(*p);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("must be I32, got F32"), std::string::npos)
        << s.message();
  }
  auto expectError = [](std::unique_ptr<fb::ProgramT> p,
                        const std::string &needle) {
    Status s = load(*p);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expectError(withCollective(O::LocalSlice, {4, 6}, {4, 6}, {0}, 0),
              "expected [2, 6]");
  expectError(withCollective(O::LocalSlice, {4, 6}, {2, 6}, {0}, 2),
              "dim 2 is out of range");
  expectError(withCollective(O::LocalSlice, {4, 6}, {2, 6}, {0}, -1),
              "dim -1 is out of range");
  expectError(withCollective(O::LocalSlice, {4, 6}, {4, 6}, {1, 0}, 1),
              "not divisible by the group size 4");
  expectError(withCollective(O::LocalSlice, {4, 6}, {2, 6}, {2}, 0),
              "axis 2 is out of range (the mesh has 2 axes)");
  expectError(withCollective(O::LocalSlice, {4, 6}, {1, 6}, {0, 0}, 0),
              "axis 0 appears twice");
  expectError(withCollective(O::LocalSlice, {4, 6}, {4, 6}, {}, 0),
              "names no mesh axes");
  {
    auto p = miniGpt();
    auto &ins = stage0(*p).instructions[6];
    ins->opcode = O::LocalSlice;
    ins->name = "ls";
    expectError(std::move(p), "LocalSlice needs a device mesh");
  }
}

TEST(ProgramVerifier, ParamSharding) {
  auto sharded = [](std::vector<std::vector<uint32_t>> dims,
                    std::vector<int64_t> local) {
    auto p = withCollective(fb::Opcode::AllReduce, {4}, {4}, {0});
    StageBuilder s(stage0(*p));
    s.slicedParam("extra.weight", {8, 6}, {}, local);
    for (auto &axes : dims) {
      auto ds = std::make_unique<fb::DimShardingT>();
      ds->axes = axes;
      stage0(*p).params.back()->sharding.push_back(std::move(ds));
    }
    return p;
  };
  EXPECT_TRUE(load(*sharded({{0}, {}}, {4, 6})).ok());
  EXPECT_TRUE(load(*sharded({{0, 1}, {}}, {2, 6})).ok());
  EXPECT_TRUE(load(*sharded({{1}, {0}}, {4, 3})).ok());
  auto rejected = [](std::unique_ptr<fb::ProgramT> p, const std::string &n) {
    Status s = load(*p);
    ASSERT_FALSE(s.ok()) << n;
    EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
  };
  rejected(sharded({{0}, {}}, {8, 6}),
           "dimension 0 has local size 8 x 2 blocks, but the global size is 8");
  rejected(sharded({{0}}, {4, 6}), "sharding has 1 entries");
  rejected(sharded({{0}, {0}}, {4, 3}), "mesh axis 0 shards more than one");
  rejected(sharded({{3}, {}}, {4, 6}), "names axis 3");
}

TEST(ProgramVerifier, ZeroGradAndMomentSharding) {
  // A replicated [8, 6] parameter whose gradient and moments are sharded
  // (ZeRO-1/2): their buffers have the global shape divided by the blocks.
  using Dims = std::vector<std::vector<uint32_t>>;
  auto zero = [](Dims grad, Dims moment, std::vector<int64_t> gradShape,
                 std::vector<int64_t> momentShape,
                 std::vector<int64_t> vShape = {}) {
    auto p = withCollective(fb::Opcode::AllReduce, {4}, {4}, {0});
    StageBuilder s(stage0(*p));
    s.param("extra.weight", {8, 6});
    auto &param = *stage0(*p).params.back();
    param.grad_buffer = static_cast<int32_t>(s.buffer("g", gradShape));
    param.m_buffer = static_cast<int32_t>(s.buffer("m", momentShape));
    param.v_buffer = static_cast<int32_t>(
        s.buffer("v", vShape.empty() ? momentShape : vShape));
    auto fill = [](Dims dims, std::vector<std::unique_ptr<fb::DimShardingT>> &out) {
      for (auto &axes : dims) {
        auto ds = std::make_unique<fb::DimShardingT>();
        ds->axes = axes;
        out.push_back(std::move(ds));
      }
    };
    fill(grad, param.grad_sharding);
    fill(moment, param.moment_sharding);
    return p;
  };
  auto accepted = [](std::unique_ptr<fb::ProgramT> p) {
    Status s = load(*p);
    EXPECT_TRUE(s.ok()) << s.toString();
  };
  // Unsharded grad / m / v: the parameter's shape, as before.
  accepted(zero({}, {}, {8, 6}, {8, 6}));
  // ZeRO-1: moments over dp on dim 0; ZeRO-2: the gradient too.
  accepted(zero({}, {{0}, {}}, {8, 6}, {4, 6}));
  accepted(zero({{0}, {}}, {{0}, {}}, {4, 6}, {4, 6}));
  // Both axes on one dimension, or one axis per dimension; an all-empty
  // sharding is replicated (the global shape).
  accepted(zero({{0, 1}, {}}, {{1}, {0}}, {2, 6}, {4, 3}));
  accepted(zero({{}, {}}, {{}, {}}, {8, 6}, {8, 6}));
  auto rejected = [](std::unique_ptr<fb::ProgramT> p,
                     std::vector<std::string> needles) {
    Status s = load(*p);
    ASSERT_FALSE(s.ok()) << needles[0];
    for (const std::string &n : needles)
      EXPECT_NE(s.message().find(n), std::string::npos)
          << s.message() << "\nmissing: " << n;
  };
  // The moments are sharded, but m keeps the parameter's shape.
  rejected(zero({}, {{0}, {}}, {8, 6}, {8, 6}),
           {"'extra.weight'", "m_buffer",
            "expected moment_sharding's block [4, 6] F32"});
  // v disagrees with m.
  rejected(zero({}, {{0}, {}}, {8, 6}, {4, 6}, {8, 3}),
           {"v_buffer", "is [8, 3]", "expected moment_sharding's block [4, 6]"});
  // The gradient is sharded but keeps the parameter's shape.
  rejected(zero({{1}, {}}, {}, {8, 6}, {8, 6}),
           {"grad_buffer", "expected grad_sharding's block [4, 6] F32"});
  // Without grad_sharding the gradient has the parameter's shape.
  rejected(zero({}, {}, {4, 6}, {8, 6}),
           {"grad_buffer", "expected the parameter's [8, 6] F32"});
  rejected(zero({}, {{0}}, {8, 6}, {4, 6}),
           {"moment_sharding has 1 entries, expected one per dimension (2)"});
  rejected(zero({{0}, {0}}, {}, {4, 3}, {8, 6}),
           {"grad_sharding: mesh axis 0 shards more than one"});
  rejected(zero({}, {{2}, {}}, {8, 6}, {4, 6}),
           {"moment_sharding of dimension 0 names axis 2, but the mesh has 2"});
  // 6 columns do not split into 4 blocks.
  rejected(zero({}, {{}, {0, 1}}, {8, 6}, {8, 1}),
           {"moment_sharding: dimension 1 of the global shape [8, 6] is not "
            "divisible into 4 blocks"});
  // Sharded state needs a mesh.
  {
    auto p = zero({}, {{0}, {}}, {8, 6}, {4, 6});
    p->mesh.clear();
    stage0(*p).instructions.pop_back(); // the AllReduce
    p->model->batch = 2;
    rejected(std::move(p),
             {"has moment_sharding but Program.mesh is empty"});
  }
}

//===----------------------------------------------------------------------===//
// Params and special buffers
//===----------------------------------------------------------------------===//

TEST(ProgramVerifier, Params) {
  expectRejected([](fb::ProgramT &p) { stage0(p).params[1]->buffer = 500; },
                 {"param #1 'wpe.weight'", "buffer 500 is out of range"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).params[1]->global_shape = {8, 16, 1};
      },
      {"'wpe.weight'", "rank 3", "rank 2"});
}

TEST(ProgramVerifier, ParamSlices) {
  // A [8, 16] local slice at offset [0, 8] of a [8, 20] tensor leaves it.
  auto p = miniGpt();
  stage0(*p).params[1]->global_shape = {8, 20};
  stage0(*p).params[1]->slice_offset = {0, 8};
  Status s = load(*p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("leaves the global shape [8, 20]"),
            std::string::npos)
      << s.message();
  // The same slice at offset [0, 4] is inside.
  stage0(*p).params[1]->slice_offset = {0, 4};
  EXPECT_TRUE(load(*p).ok());
  stage0(*p).params[1]->slice_offset = {0};
  EXPECT_NE(load(*p).message().find("slice_offset"), std::string::npos);

  expectRejected(
      [](fb::ProgramT &p) { stage0(p).params[2]->name = "wte.weight"; },
      {"appears twice"});
  expectRejected([](fb::ProgramT &p) { stage0(p).params[2]->name = ""; },
                 {"has no name"});
  expectRejected(
      [](fb::ProgramT &p) { stage0(p).params[0]->buffer = stage0(p).tokens; },
      {"'wte.weight'", "must be F32"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).params[0]->init = static_cast<fb::InitKind>(7);
      },
      {"unknown init kind 7"});
}

TEST(ProgramVerifier, CheckpointShape) {
  // A checkpoint shape regroups the parameter's elements (c_attn's [C, 3, C]
  // saved as HF's [C, 3C]); any other count is rejected.
  auto p = miniGpt();
  const std::vector<int64_t> global = stage0(*p).params[1]->global_shape;
  stage0(*p).params[1]->checkpoint_shape = {global[0] * global[1]};
  EXPECT_TRUE(load(*p).ok());
  expectRejected(
      [](fb::ProgramT &p) { stage0(p).params[1]->checkpoint_shape = {3, 5}; },
      {"'wpe.weight'", "checkpoint shape [3, 5] has 15 elements"});
  expectRejected(
      [](fb::ProgramT &p) { stage0(p).params[1]->checkpoint_shape = {0}; },
      {"'wpe.weight'", "checkpoint shape [0] is invalid"});
}

TEST(ProgramVerifier, UnpaddedRows) {
  // A padded parameter (a vocabulary padded for tensor parallelism) names
  // its real rows: at most the global rows, never with a regrouping.
  auto p = miniGpt();
  const int64_t rows = stage0(*p).params[1]->global_shape[0];
  stage0(*p).params[1]->unpadded_rows = rows - 1;
  EXPECT_TRUE(load(*p).ok());
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).params[1]->unpadded_rows =
            stage0(p).params[1]->global_shape[0] + 1;
      },
      {"'wpe.weight'", "unpadded_rows =", "must be in [0, "});
  expectRejected(
      [](fb::ProgramT &p) {
        auto &param = *stage0(p).params[1];
        param.unpadded_rows = param.global_shape[0] - 1;
        param.checkpoint_shape = {param.global_shape[0] * param.global_shape[1]};
      },
      {"'wpe.weight'", "has both unpadded_rows and checkpoint_shape"});
}

TEST(ProgramVerifier, VocabShards) {
  // Reading a vocabulary shard needs a mesh to find the shard.
  expectRejected([](fb::ProgramT &p) { instr(p, "wte").axes = {0}; },
                 {"'wte' (Embedding)", "Program.mesh is empty"});
  // The vocab-parallel loss checks its per-token shapes.
  expectRejected(
      [](fb::ProgramT &p) {
        fb::InstructionT &ce = instr(p, "loss");
        ce.opcode = fb::Opcode::CrossEntropySums;
        ce.outputs = {ce.scratch[0], ce.outputs[0]};
        ce.scratch.clear();
        ce.inputs = {ce.inputs[0], ce.inputs[0], ce.inputs[1]};
      },
      {"row_max", "has shape"});
}

TEST(ProgramVerifier, SpecialBuffers) {
  expectRejected([](fb::ProgramT &p) { stage0(p).tokens = 1000; },
                 {"tokens buffer 1000 is out of range"});
  expectRejected([](fb::ProgramT &p) { stage0(p).tokens = -2; },
                 {"tokens buffer -2"});
  expectRejected([](fb::ProgramT &p) { stage0(p).targets = 0; },
                 {"targets buffer 0 must be I32"});
  expectRejected([](fb::ProgramT &p) { stage0(p).loss = stage0(p).targets; },
                 {"loss buffer", "must be F32"});
  expectRejected(
      [](fb::ProgramT &p) {
        stage0(p).loss = static_cast<int32_t>(instr(p, "ln_f").outputs[0]);
      },
      {"must be a scalar"});
}

//===----------------------------------------------------------------------===//
// Training programs
//===----------------------------------------------------------------------===//

/// Applies `edit` to a fresh mini GPT training program (M micro-batches) and
/// expects a load error containing every string of `needles`.
void expectTrainRejected(const std::function<void(fb::ProgramT &)> &edit,
                         const std::vector<std::string> &needles,
                         int64_t microbatches = 1) {
  MiniGptTrainOptions o;
  o.microbatches = microbatches;
  auto p = miniGptTrain({}, o);
  edit(*p);
  Status s = load(*p);
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << needles[0] << "'";
  for (const std::string &n : needles)
    EXPECT_NE(s.message().find(n), std::string::npos)
        << "message: " << s.message() << "\nmissing: " << n;
}

/// The update instruction named `name` in stage 0.
fb::InstructionT &update(fb::ProgramT &p, const std::string &name) {
  for (auto &i : stage0(p).update_instructions)
    if (i->name == name)
      return *i;
  ADD_FAILURE() << "no update instruction " << name;
  return *stage0(p).update_instructions[0];
}

/// Shape of the buffer named `name` in stage 0.
std::vector<int64_t> &shapeOf(fb::ProgramT &p, const std::string &name) {
  for (auto &b : stage0(p).buffers)
    if (b->name == name)
      return b->shape;
  ADD_FAILURE() << "no buffer " << name;
  return stage0(p).buffers[0]->shape;
}

uint32_t bufferIndex(fb::ProgramT &p, const std::string &name) {
  for (size_t k = 0; k < stage0(p).buffers.size(); ++k)
    if (stage0(p).buffers[k]->name == name)
      return static_cast<uint32_t>(k);
  ADD_FAILURE() << "no buffer " << name;
  return 0;
}

TEST(ProgramVerifier, TrainingProgramsLoad) {
  for (int64_t m : {1, 2}) {
    MiniGptTrainOptions o;
    o.microbatches = m;
    Status s = load(*miniGptTrain({}, o));
    EXPECT_TRUE(s.ok()) << s.toString();
  }
}

TEST(ProgramVerifier, GradientShapes) {
  // LinearGrad: dweight like the weight, dbias [N], dout [..., N].
  expectTrainRejected(
      [](fb::ProgramT &p) {
        shapeOf(p, "dlinear.h.0.mlp.c_fc.weight") = {64, 16};
      },
      {"'h.0.mlp.c_fc.grad' (LinearGrad)", "dweight", "expected [16, 64]"});
  expectTrainRejected(
      [](fb::ProgramT &p) { shapeOf(p, "dlinear.h.0.mlp.c_fc.bias") = {16}; },
      {"dbias", "expected [64]"});
  expectTrainRejected(
      [](fb::ProgramT &p) { instr(p, "h.0.mlp.c_fc.grad").outputs.resize(1); },
      {"LinearGrad has 2 to 3 outputs, got 1"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        auto &ins = instr(p, "h.0.mlp.c_fc.grad");
        ins.outputs[1] = ins.outputs[0];
      },
      {"output #0", "overlaps output #1"});
  // MatmulGrad: drhs like rhs, dout [..., N].
  expectTrainRejected(
      [](fb::ProgramT &p) {
        shapeOf(p, "dmatmul.wte.weight") = {16, 64};
      },
      {"(MatmulGrad)", "drhs", "expected [64, 16]"});
  expectTrainRejected(
      [](fb::ProgramT &p) { instr(p, "lm_head.grad").transpose_rhs = false; },
      {"(MatmulGrad)", "contracting dimensions differ"});
  // LayerNormGrad: dweight / dbias [C], epsilon, scratch.
  expectTrainRejected(
      [](fb::ProgramT &p) { shapeOf(p, "dln.ln_f.bias") = {8}; },
      {"'ln_f.grad' (LayerNormGrad)", "dbias", "expected [16]"});
  expectTrainRejected(
      [](fb::ProgramT &p) { instr(p, "ln_f.grad").epsilon = 0; },
      {"epsilon must be in (0, 1)"});
  expectTrainRejected(
      [](fb::ProgramT &p) { instr(p, "ln_f.grad").scratch.pop_back(); },
      {"scratch must be empty or [mean, rstd]"});
  // GeluGrad: dout like the input.
  expectTrainRejected(
      [](fb::ProgramT &p) {
        instr(p, "h.0.mlp.gelu.grad").inputs[0] = bufferIndex(p, "d.h2");
      },
      {"(GeluGrad)", "dout", "expected [2, 8, 64]"});
  // AttentionGrad: dqkv like qkv, dout [B, T, C], heads, probabilities.
  expectTrainRejected(
      [](fb::ProgramT &p) {
        instr(p, "h.0.attn.grad").outputs[0] = bufferIndex(p, "d.att");
      },
      {"(AttentionGrad)", "dqkv", "expected [2, 8, 48]"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        instr(p, "h.0.attn.grad").inputs[0] = bufferIndex(p, "d.gelu");
      },
      {"(AttentionGrad)", "dout has shape [2, 8, 64], expected [2, 8, 16]"});
  expectTrainRejected(
      [](fb::ProgramT &p) { instr(p, "h.0.attn.grad").num_heads = 5; },
      {"not divisible by num_heads 5"});
  // Its scratch, when planned, holds the flash backward's recomputed
  // output [B, T, C] = [2, 8, 16], log-sum-exp and row dot products
  // [B, NH, T] = [2, 2, 8] each: 320 F32 elements.
  auto withGradScratch = [](std::vector<int64_t> shape, fb::DType dt) {
    return [shape, dt](fb::ProgramT &p) {
      StageBuilder b(stage0(p));
      instr(p, "h.0.attn.grad").scratch = {b.buffer("att.grad.ws", shape, dt)};
    };
  };
  {
    auto p = miniGptTrain({}, MiniGptTrainOptions());
    withGradScratch({320}, fb::DType::F32)(*p);
    Status s = load(*p);
    EXPECT_TRUE(s.ok()) << s.toString();
  }
  expectTrainRejected(
      [](fb::ProgramT &p) {
        instr(p, "h.0.attn.grad").scratch = {bufferIndex(p, "att.stats")};
      },
      {"(AttentionGrad)", "has 32 elements, expected 320"});
  expectTrainRejected(withGradScratch({320}, fb::DType::BF16),
                      {"(AttentionGrad)", "scratch", "must be F32, got BF16"});
  // The saved form (what a compiled training step runs): the forward
  // returns its log-sum-exp as a second output, F32 [B, NH, T], and the
  // gradient reads it and the forward's output, with only the row dot
  // products [B, NH, T] = 32 elements of scratch.
  auto saved = [](fb::ProgramT &p) {
    auto &fwd = instr(p, "h.0.attn");
    fwd.outputs.push_back(fwd.scratch[0]);
    fwd.scratch.clear();
    auto &grad = instr(p, "h.0.attn.grad");
    grad.inputs.push_back(fwd.outputs[0]);
    grad.inputs.push_back(fwd.outputs[1]);
  };
  {
    auto p = miniGptTrain({}, MiniGptTrainOptions());
    saved(*p);
    Status s = load(*p);
    EXPECT_TRUE(s.ok()) << s.toString();
    withGradScratch({32}, fb::DType::F32)(*p);
    s = load(*p);
    EXPECT_TRUE(s.ok()) << s.toString();
  }
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        saved(p);
        withGradScratch({320}, fb::DType::F32)(p);
      },
      {"(AttentionGrad)", "has 320 elements, expected 32", "row dot products"});
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        saved(p);
        instr(p, "h.0.attn.grad").inputs.pop_back();
      },
      {"(AttentionGrad)", "optionally both the forward's output and "
                          "log-sum-exp, got 3 inputs"});
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        saved(p);
        instr(p, "h.0.attn.grad").inputs[3] = bufferIndex(p, "d.att");
      },
      {"(AttentionGrad)", "saved lse (buffer",
       "has shape [2, 8, 16], expected [2, 2, 8]"});
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        saved(p);
        instr(p, "h.0.attn.grad").inputs[2] = bufferIndex(p, "qkv");
      },
      {"(AttentionGrad)", "saved out (the forward's result)"});
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        saved(p);
        instr(p, "h.0.attn").outputs[1] = bufferIndex(p, "proj");
      },
      {"'h.0.attn' (Attention)", "lse (buffer",
       "has shape [2, 8, 16], expected [2, 2, 8]"});
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        saved(p);
        stage0(p).buffers[instr(p, "h.0.attn").outputs[1]]->dtype =
            fb::DType::BF16;
      },
      {"'h.0.attn' (Attention)", "lse", "must be F32, got BF16"});
  // CrossEntropyGrad: scalar dloss, I32 targets, dlogits like logits.
  expectTrainRejected([](fb::ProgramT &p) { shapeOf(p, "d.loss") = {2}; },
                      {"(CrossEntropyGrad)", "dloss (scalar)", "expected 1"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        instr(p, "loss.grad").inputs[2] = bufferIndex(p, "logits");
      },
      {"targets", "must be I32"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        shapeOf(p, "d.logits") = {2, 8, 50};
      },
      {"dlogits", "expected [2, 8, 64]"});
  // EmbeddingGrad: dout [..., C] with ids' leading shape, dtable [V, C].
  expectTrainRejected(
      [](fb::ProgramT &p) {
        shapeOf(p, "dembedding.wte.weight") = {64, 8};
      },
      {"(EmbeddingGrad)", "dout", "expected [2, 8, 8]"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        instr(p, "wte.grad").inputs[1] = bufferIndex(p, "x");
      },
      {"(EmbeddingGrad)", "ids", "must be I32"});
  // ReduceLeading: the result is a trailing suffix of the input shape.
  expectTrainRejected(
      [](fb::ProgramT &p) {
        shapeOf(p, "dreduce.wpe.weight") = {2, 8};
      },
      {"(ReduceLeading)", "must equal the trailing dimensions"});
  // Fill: F32 / BF16 / I32 result, integral value for I32. (A BF16 seed
  // then fails where it is read as a scalar.)
  expectTrainRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[bufferIndex(p, "d.loss")]->dtype = fb::DType::BF16;
      },
      {"(CrossEntropyGrad)", "dloss (scalar)", "must be F32, got BF16"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        auto &fill = instr(p, "loss.seed");
        fill.outputs[0] = bufferIndex(p, "tokens");
        fill.value = 0.5;
      },
      {"(Fill)", "value 0.5 is not an int32"});
}

TEST(ProgramVerifier, SliceGradShapes) {
  auto make = [](int64_t offset, std::vector<int64_t> outShape, int64_t dim) {
    auto p = emptyProgram(1, 1, 2);
    StageBuilder s(*p->stages[0]);
    const uint32_t d = s.buffer("dout", {2, 3, 4});
    const uint32_t o = s.buffer("out", outShape);
    auto &ins = s.op(fb::Opcode::SliceGrad, "slice.grad", {d}, {o});
    ins.dim = dim;
    ins.offset = offset;
    return load(*p);
  };
  EXPECT_TRUE(make(2, {2, 5, 4}, 1).ok());
  auto expectError = [](const Status &s, const std::string &needle) {
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expectError(
      make(3, {2, 5, 4}, 1),
      "dout of 3 at offset 3 of dimension 1 is out of bounds for size 5");
  expectError(make(-1, {2, 5, 4}, 1), "out of bounds");
  expectError(make(0, {2, 5, 5}, 1), "only dimension 1 may differ");
  expectError(make(0, {2, 5}, 1), "differs from dout rank");
  expectError(make(0, {2, 5, 4}, 3), "dim 3 is out of range");
}

TEST(ProgramVerifier, OptimizerInstructions) {
  // SumSquares: F32 gradients in, one scalar out.
  expectTrainRejected(
      [](fb::ProgramT &p) { update(p, "sum_squares").inputs.clear(); },
      {"update instruction #0 'sum_squares' (SumSquares)",
       "takes 1 or more inputs, got 0"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        update(p, "sum_squares").inputs[0] = bufferIndex(p, "tokens");
      },
      {"(SumSquares)", "gradient (buffer", "must be F32 or BF16, got I32"});
  expectTrainRejected(
      [](fb::ProgramT &p) { shapeOf(p, "grad_sum_squares") = {2}; },
      {"(SumSquares)", "sum of squares (scalar)", "expected 1"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        update(p, "sum_squares").outputs.push_back(bufferIndex(p, "lr"));
      },
      {"(SumSquares)", "has 1 output(s), got 2"});
  // ClipCoef: the scalar sum in, norm and coefficient out.
  expectTrainRejected(
      [](fb::ProgramT &p) {
        update(p, "clip").inputs.push_back(bufferIndex(p, "lr"));
      },
      {"update instruction #1 'clip' (ClipCoef)", "takes 1 inputs, got 2"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        update(p, "clip").inputs[0] = bufferIndex(p, "grad.wte.weight");
      },
      {"(ClipCoef)", "sumsq (scalar)"});
  expectTrainRejected([](fb::ProgramT &p) { shapeOf(p, "grad_norm") = {3}; },
                      {"(ClipCoef)", "norm (scalar)"});
  expectTrainRejected([](fb::ProgramT &p) { shapeOf(p, "clip_coef") = {2}; },
                      {"(ClipCoef)", "coef (scalar)"});
  expectTrainRejected([](fb::ProgramT &p) { update(p, "clip").max_norm = NAN; },
                      {"(ClipCoef)", "max_norm nan is not finite"});
  // AdamW: 7 inputs, outputs are the param / m / v inputs, hyper-parameters.
  const std::string w = "adamw.h.0.mlp.c_fc.weight";
  expectTrainRejected([&](fb::ProgramT &p) { update(p, w).inputs.pop_back(); },
                      {"(AdamW)", "AdamW takes 7 inputs, got 6"});
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        auto &ins = update(p, w);
        ins.outputs[1] = bufferIndex(p, "d.fc");
      },
      {"updated m", "expected [16, 64]"});
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        update(p, w).inputs[1] = bufferIndex(p, "grad.h.0.mlp.c_proj.weight");
      },
      {"grad (buffer", "expected [16, 64]"});
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        auto &ins = update(p, w);
        ins.inputs[2] = ins.inputs[1]; // m is the gradient
        ins.outputs[1] = ins.inputs[1];
      },
      {"grad (buffer", "overlaps m"});
  expectTrainRejected(
      [&](fb::ProgramT &p) { update(p, w).inputs[5] = bufferIndex(p, "x"); },
      {"step (scalar)"});
  expectTrainRejected([&](fb::ProgramT &p) { update(p, w).beta1 = 1.0; },
                      {"beta1 must be in [0, 1), got 1"});
  expectTrainRejected([&](fb::ProgramT &p) { update(p, w).beta2 = -0.1; },
                      {"beta2 must be in [0, 1)"});
  expectTrainRejected([&](fb::ProgramT &p) { update(p, w).adam_eps = 0; },
                      {"adam_eps must be positive"});
  expectTrainRejected(
      [&](fb::ProgramT &p) { update(p, w).weight_decay = -1e-2; },
      {"weight_decay must be >= 0"});
  // The optimizer belongs in update_instructions.
  expectTrainRejected(
      [](fb::ProgramT &p) {
        auto &st = stage0(p);
        st.instructions.push_back(std::move(st.update_instructions.back()));
        st.update_instructions.pop_back();
      },
      {"(AdamW)", "it belongs in update_instructions"});
  for (const std::string name : {"sum_squares", "clip"})
    expectTrainRejected(
        [&](fb::ProgramT &p) {
          auto &st = stage0(p);
          for (auto it = st.update_instructions.begin();
               it != st.update_instructions.end(); ++it)
            if ((*it)->name == name) {
              st.instructions.push_back(std::move(*it));
              st.update_instructions.erase(it);
              break;
            }
        },
        {"'" + name + "'", "it belongs in update_instructions"});
}

TEST(ProgramVerifier, PipelineStages) {
  // Applies `edit` to a one-chunk pipeline stage of the trained mini GPT.
  auto rejected = [](const std::function<void(fb::ProgramT &)> &edit,
                     const std::string &needle) {
    MiniGptTrainOptions o;
    o.microbatches = 2;
    MiniGptDims d;
    d.B = 4;
    auto p = miniGptTrain(d, o);
    makeSingleChunkPipeline(*p);
    edit(*p);
    Status s = load(*p);
    ASSERT_FALSE(s.ok()) << "expected an error containing '" << needle << "'";
    EXPECT_NE(s.message().find(needle), std::string::npos)
        << "message: " << s.message() << "\nmissing: " << needle;
  };
  {
    MiniGptTrainOptions o;
    o.microbatches = 2;
    MiniGptDims d;
    d.B = 4;
    auto p = miniGptTrain(d, o);
    makeSingleChunkPipeline(*p);
    Status s = load(*p);
    EXPECT_TRUE(s.ok()) << s.toString();
  }
  rejected(
      [](fb::ProgramT &p) {
        auto &chunk = *p.stages[0]->pipeline->chunks[0];
        p.stages[0]->instructions.push_back(std::move(chunk.forward.back()));
        chunk.forward.pop_back();
      },
      "Stage.instructions must be empty");
  rejected([](fb::ProgramT &p) { p.stages[0]->pipeline->chunks.clear(); },
           "the pipeline has no chunks");
  rejected(
      [](fb::ProgramT &p) {
        p.stages[0]->pipeline->predicted_stash_peak_bytes = -7;
      },
      "predicted_stash_peak_bytes -7 is negative");
  // What the forward keeps lives in the chunk's stash slot (Buffer.stash),
  // read there by the backward under the same name's offset.
  rejected(
      [](fb::ProgramT &p) {
        p.stages[0]->pipeline->chunks[0]->stash_in = {
            static_cast<uint32_t>(p.stages[0]->tokens)};
      },
      "' is in the arena, not in the stash slot (Buffer.stash)");
  rejected(
      [](fb::ProgramT &p) {
        p.stages[0]->pipeline->chunks[0]->stash_in.push_back(0);
      },
      "the forward keeps 1 stashed buffers but the backward reads 2");
  rejected(
      [](fb::ProgramT &p) {
        p.stages[0]->pipeline->chunks[0]->stash_bytes = 64;
      },
      "leave the chunk's stash slot of 64 bytes");
  rejected(
      [](fb::ProgramT &p) {
        // The backward reads the logits at another offset of the slot.
        fb::StageT &st = *p.stages[0];
        auto &chunk = *st.pipeline->chunks[0];
        auto copy = std::make_unique<fb::BufferT>(*st.buffers[chunk.stash_out[0]]);
        copy->offset = chunk.stash_bytes;
        chunk.stash_bytes *= 2;
        st.buffers.push_back(std::move(copy));
        chunk.stash_in = {static_cast<uint32_t>(st.buffers.size() - 1)};
      },
      "at slot offset 0 but read as");
  rejected(
      [](fb::ProgramT &p) {
        // The update runs with no slot bound.
        p.stages[0]->buffers[static_cast<size_t>(p.stages[0]->lr)]->stash =
            true;
      },
      "is in a stash slot, but only a pipeline chunk's forward and backward "
      "run with one");
  rejected(
      [](fb::ProgramT &p) {
        fb::StageT &st = *p.stages[0];
        st.buffers[static_cast<size_t>(st.params[0]->m_buffer)]->stash = true;
      },
      "a parameter's buffers must be in the arena");
  rejected(
      [](fb::ProgramT &p) {
        p.stages[0]->pipeline->chunks[0]->loss = p.stages[0]->tokens;
      },
      "must be an F32 scalar");
  rejected(
      [](fb::ProgramT &p) {
        p.stages[0]->pipeline->actions[1] = fb::PipelineAction(0, 5, true);
      },
      "out of range");
  rejected(
      [](fb::ProgramT &p) {
        auto &a = p.stages[0]->pipeline->actions;
        std::swap(a[0], a[1]);
      },
      "repeats or precedes its forward");
  rejected([](fb::ProgramT &p) { p.stages[0]->pipeline->actions.pop_back(); },
           "need one each");
  rejected(
      [](fb::ProgramT &p) {
        p.stages[0]->pipeline->chunks[0]->backward[0]->opcode =
            fb::Opcode::AdamW;
      },
      "belongs in update_instructions");
}

TEST(ProgramVerifier, ForwardOnlyPipelineStages) {
  // An evaluation's pipeline stage (no update_instructions): forwards only.
  auto rejected = [](const std::function<void(fb::ProgramT &)> &edit,
                     const std::string &needle) {
    MiniGptTrainOptions o;
    o.microbatches = 2;
    MiniGptDims d;
    d.B = 4;
    auto p = miniGptTrain(d, o);
    makeForwardOnlyPipeline(*p);
    edit(*p);
    Status s = load(*p);
    ASSERT_FALSE(s.ok()) << "expected an error containing '" << needle << "'";
    EXPECT_NE(s.message().find(needle), std::string::npos)
        << "message: " << s.message() << "\nmissing: " << needle;
  };
  {
    MiniGptTrainOptions o;
    o.microbatches = 2;
    MiniGptDims d;
    d.B = 4;
    auto p = miniGptTrain(d, o);
    makeForwardOnlyPipeline(*p);
    Status s = load(*p);
    EXPECT_TRUE(s.ok()) << s.toString();
  }
  rejected(
      [](fb::ProgramT &p) {
        p.stages[0]->pipeline->actions.emplace_back(0, 0, true);
      },
      "is a backward, but the stage has no update_instructions");
  rejected(
      [](fb::ProgramT &p) {
        auto &chunk = *p.stages[0]->pipeline->chunks[0];
        chunk.backward.push_back(std::move(chunk.forward.back()));
        chunk.forward.pop_back();
      },
      "the chunk has backward instructions or stashes activations");
  rejected([](fb::ProgramT &p) { p.stages[0]->pipeline->actions.pop_back(); },
           "the actions run 1 forwards but 1 chunks x 2 micro-batches need "
           "one each");
}

TEST(ProgramVerifier, AllReduceAmongMembers) {
  auto p = miniGptTrain();
  makeDataParallel(*p, 4);
  auto &sync = *p->stages[0]->update_instructions[0];
  sync.reduction = fb::Reduction::Sum;
  sync.members = {0, 3};
  Status ok = load(*p);
  EXPECT_TRUE(ok.ok()) << ok.toString();
  sync.members = {0, 4};
  Status s = load(*p);
  EXPECT_NE(s.message().find("members must be increasing coordinates below "
                             "the axis size 4, got 4"),
            std::string::npos)
      << s.message();
  sync.members = {2};
  s = load(*p);
  EXPECT_NE(s.message().find("needs at least two members"), std::string::npos)
      << s.message();
  sync.members = {0, 1};
  sync.async_collective = true;
  s = load(*p);
  EXPECT_NE(s.message().find("reduces one value over one axis, synchronously"),
            std::string::npos)
      << s.message();
}

TEST(ProgramVerifier, LastMicrobatchAllReduce) {
  // DDP's no_sync: gradient all-reduces in the micro-batch instructions, in
  // place, run in the last micro-batch only.
  MiniGptTrainOptions o;
  o.microbatches = 2;
  MiniGptDims d;
  d.B = 4;
  auto good = [&]() {
    auto p = miniGptTrain(d, o);
    makeDataParallel(*p, 2);
    reduceGradientsInLastMicrobatch(*p);
    return p;
  };
  Status s = load(*good());
  EXPECT_TRUE(s.ok()) << s.toString();
  auto rejected = [&](const std::function<void(fb::ProgramT &)> &edit,
                      const std::string &needle) {
    auto p = good();
    edit(*p);
    Status r = load(*p);
    ASSERT_FALSE(r.ok()) << "expected: " << needle;
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
  };
  auto lastSync = [](fb::ProgramT &p) -> fb::InstructionT & {
    return *stage0(p).instructions.back();
  };
  // Skipped in the other micro-batches, its result must be its input.
  rejected(
      [&](fb::ProgramT &p) {
        fb::InstructionT &sync = lastSync(p);
        for (auto &param : stage0(p).params)
          if (static_cast<int32_t>(sync.inputs[0]) == param->grad_buffer)
            sync.outputs[0] = static_cast<uint32_t>(param->m_buffer);
      },
      "a last-micro-batch AllReduce reduces in place, but output buffer");
  // Only an AllReduce, only in a training step's micro-batch list or a
  // pipeline chunk's backward.
  rejected(
      [](fb::ProgramT &p) {
        stage0(p).instructions[0]->last_microbatch_only = true;
      },
      "only AllReduce and ReduceScatter may run in the last micro-batch "
      "only, not Embedding");
  rejected(
      [&](fb::ProgramT &p) {
        auto moved = std::move(stage0(p).instructions.back());
        stage0(p).instructions.pop_back();
        stage0(p).update_instructions.insert(
            stage0(p).update_instructions.begin(), std::move(moved));
      },
      "update instruction #0 'dp.sync.ln_f.bias' (AllReduce): "
      "last_microbatch_only belongs in the instructions of a training stage "
      "or a pipeline chunk's backward");
  rejected(
      [&](fb::ProgramT &p) { lastSync(p).members = {0, 1}; },
      "an AllReduce among pipeline members cannot run in the last "
      "micro-batch only");
  // In a pipeline: the chunk's backward, not its forward (which also runs
  // in evaluations).
  {
    auto p = good();
    makeSingleChunkPipeline(*p);
    Status pipelined = load(*p);
    EXPECT_TRUE(pipelined.ok()) << pipelined.toString();
    auto &chunk = *stage0(*p).pipeline->chunks[0];
    chunk.forward[0]->last_microbatch_only = true;
    pipelined = load(*p);
    EXPECT_NE(pipelined.message().find(
                  "last_microbatch_only belongs in the instructions of a "
                  "training stage or a pipeline chunk's backward"),
              std::string::npos)
        << pipelined.message();
  }
  // An evaluation (no update) has no micro-batches to skip.
  auto eval = miniGpt();
  makeDataParallel(*eval, 2);
  stage0(*eval).update_instructions.clear();
  for (auto &ins : stage0(*eval).instructions)
    if (ins->name == "dp.loss")
      ins->last_microbatch_only = true;
  s = load(*eval);
  EXPECT_NE(s.message().find("'dp.loss' (AllReduce): last_microbatch_only "
                             "belongs in the instructions of a training stage "
                             "or a pipeline chunk's backward"),
            std::string::npos)
      << s.message();
}

TEST(ProgramVerifier, TrainingParamsAndStage) {
  // Param training buffers: in range, the param's shape, F32, disjoint.
  expectTrainRejected(
      [](fb::ProgramT &p) { stage0(p).params[2]->grad_buffer = 9999; },
      {"param #2 'h.0.ln_1.weight'", "grad_buffer 9999 is out of range"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        stage0(p).params[0]->m_buffer =
            static_cast<int32_t>(bufferIndex(p, "x"));
      },
      {"param #0 'wte.weight'", "m_buffer",
       "expected the parameter's [64, 16] F32"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        stage0(p).params[3]->v_buffer =
            static_cast<int32_t>(stage0(p).params[3]->buffer);
      },
      {"v_buffer", "overlaps buffer"});
  expectTrainRejected(
      [](fb::ProgramT &p) { stage0(p).params[4]->v_buffer = -1; },
      {"needs grad_buffer, m_buffer and v_buffer for every parameter"});
  // Stage scalars and micro-batches.
  expectTrainRejected([](fb::ProgramT &p) { stage0(p).lr = -1; },
                      {"needs the lr and step scalar buffers"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        stage0(p).step = static_cast<int32_t>(bufferIndex(p, "x"));
      },
      {"step buffer", "must be a scalar"});
  expectTrainRejected(
      [](fb::ProgramT &p) {
        stage0(p).grad_norm = static_cast<int32_t>(bufferIndex(p, "tokens"));
      },
      {"grad_norm buffer", "must be F32"});
  expectTrainRejected([](fb::ProgramT &p) { stage0(p).microbatches = 0; },
                      {"microbatches = 0 must be >= 1"});
  expectTrainRejected([](fb::ProgramT &p) { stage0(p).microbatches = 3; },
                      {"microbatches = 3", "divide the batch of 2 rows"});
  // The tokens hold one micro-batch: batch / microbatches x seq.
  expectTrainRejected([](fb::ProgramT &p) { stage0(p).microbatches = 1; },
                      {"tokens buffer [1, 8]", "2 / 1 x 8 = 16 tokens"}, 2);
  // An evaluation program may carry grad buffers (it never updates).
  auto p = miniGptTrain();
  stage0(*p).update_instructions.clear();
  Status s = load(*p);
  EXPECT_TRUE(s.ok()) << s.toString();
}

//===----------------------------------------------------------------------===//
// Mixed precision (bf16 storage, fp32 masters)
//===----------------------------------------------------------------------===//

/// As expectTrainRejected, on the training program made mixed precision
/// (makeMixedPrecision: bf16 tensors, fp32 masters updated then Cast).
void expectMixedRejected(const std::function<void(fb::ProgramT &)> &edit,
                         const std::vector<std::string> &needles) {
  expectTrainRejected(
      [&](fb::ProgramT &p) {
        makeMixedPrecision(p);
        edit(p);
      },
      needles);
}

TEST(ProgramVerifier, MixedPrecisionProgramsLoad) {
  auto train = miniGptTrain();
  makeMixedPrecision(*train);
  Status s = load(*train);
  EXPECT_TRUE(s.ok()) << s.toString();
  auto eval = miniGpt();
  makeMixedPrecision(*eval);
  s = load(*eval);
  EXPECT_TRUE(s.ok()) << s.toString();
  // Collectives carry bf16, averages and shared-parameter sums included.
  auto dp = miniGptTrain();
  makeDataParallel(*dp, 2);
  makeMixedPrecision(*dp);
  stage0(*dp).update_instructions[0]->members = {0, 1};
  s = load(*dp);
  EXPECT_TRUE(s.ok()) << s.toString();
}

TEST(ProgramVerifier, Cast) {
  expectMixedRejected(
      [](fb::ProgramT &p) {
        auto &cast = update(p, "cast.wte.weight");
        cast.inputs[0] = bufferIndex(p, "m.wte.weight");
        cast.outputs[0] = bufferIndex(p, "v.wte.weight");
      },
      {"update instruction", "'cast.wte.weight' (Cast)",
       "Cast converts F32 to BF16 or BF16 to F32, got F32",
       "a same-dtype move is a Copy"});
  expectMixedRejected(
      [](fb::ProgramT &p) {
        update(p, "cast.wte.weight").outputs[0] = bufferIndex(p, "wpe.weight");
      },
      {"(Cast)", "result (buffer", "has shape [8, 16], expected [64, 16]"});
  expectMixedRejected(
      [](fb::ProgramT &p) { update(p, "cast.wte.weight").outputs.clear(); },
      {"(Cast)", "has 1 output(s), got 0"});
}

TEST(ProgramVerifier, MasterBuffers) {
  // Index, dtype, shape, overlap.
  expectMixedRejected(
      [](fb::ProgramT &p) { stage0(p).params[0]->master_buffer = 9999; },
      {"param #0 'wte.weight'", "master_buffer 9999 is out of range"});
  expectMixedRejected(
      [](fb::ProgramT &p) {
        stage0(p).params[0]->master_buffer =
            static_cast<int32_t>(stage0(p).params[0]->grad_buffer);
      },
      {"param #0 'wte.weight'", "master_buffer",
       "[64, 16] BF16, expected the parameter's [64, 16] F32"});
  expectMixedRejected(
      [](fb::ProgramT &p) {
        stage0(p).params[0]->master_buffer =
            static_cast<int32_t>(bufferIndex(p, "master.wpe.weight"));
      },
      {"param #0 'wte.weight'", "master_buffer",
       "is [8, 16] F32, expected the parameter's [64, 16] F32"});
  expectMixedRejected(
      [](fb::ProgramT &p) {
        stage0(p).params[0]->master_buffer = stage0(p).params[0]->m_buffer;
      },
      {"master_buffer", "overlaps buffer"});
  // A master belongs to a bf16 parameter; a bf16 trained parameter needs
  // one; moments stay fp32 (a bf16 gradient is fine).
  expectTrainRejected(
      [](fb::ProgramT &p) {
        StageBuilder s(stage0(p));
        stage0(p).params[1]->master_buffer =
            static_cast<int32_t>(s.buffer("master.wpe", {8, 16}));
      },
      {"param #1 'wpe.weight'", "fp32 master weights belong to a BF16 "
                                "parameter"});
  expectMixedRejected(
      [](fb::ProgramT &p) { stage0(p).params[1]->master_buffer = -1; },
      {"param #1 'wpe.weight'",
       "is BF16 but the training program gives it "
       "no master_buffer",
       "--precision bf16"});
  expectMixedRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[bufferIndex(p, "m.wpe.weight")]->dtype =
            fb::DType::BF16;
      },
      {"param #1 'wpe.weight'", "m_buffer",
       "BF16, expected the parameter's [8, 16] F32"});
  expectMixedRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[bufferIndex(p, "grad.wpe.weight")]->dtype =
            fb::DType::I32;
      },
      {"grad_buffer", "I32, expected the parameter's [8, 16] F32 or BF16"});
  expectRejected(
      [](fb::ProgramT &p) { stage0(p).params[0]->buffer = stage0(p).tokens; },
      {"'wte.weight'", "must be F32 or BF16, got I32"});
}

TEST(ProgramVerifier, MixedPrecisionScalarsAndCollectives) {
  // The loss stays an f32 scalar.
  expectMixedRejected(
      [](fb::ProgramT &p) {
        stage0(p).buffers[bufferIndex(p, "loss")]->dtype = fb::DType::BF16;
      },
      {"(CrossEntropy)", "result", "must be F32, got BF16"});
  // Averages and among-member sums need float data.
  auto dp = miniGptTrain();
  makeDataParallel(*dp, 2);
  auto &sync = *stage0(*dp).update_instructions[0];
  sync.inputs[0] = sync.outputs[0] = bufferIndex(*dp, "tokens");
  Status s = load(*dp);
  EXPECT_NE(s.message().find("Avg reduction needs F32 or BF16 data, got I32"),
            std::string::npos)
      << s.message();
  sync.reduction = fb::Reduction::Sum;
  sync.members = {0, 1};
  s = load(*dp);
  EXPECT_NE(s.message().find("an AllReduce among members needs F32 or BF16 "
                             "data, got I32"),
            std::string::npos)
      << s.message();
}

} // namespace
