//===- instruction_checker_compute.cpp - Compute opcode checks --*- C++ -*-===//
//
// InstructionChecker for the compute opcodes (the forward: Embedding to
// CrossEntropy), the gradient and optimizer opcodes (EmbeddingGrad to
// ClipCoef) and the vocab-parallel loss (RowMax to CrossEntropySumsGrad):
// the shape rules of the compiler's op verifiers.
//
//===----------------------------------------------------------------------===//
#include "runtime/program/verifier_internal.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace loom::program::detail {

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

Status InstructionChecker::matmulResultShape(uint32_t lhs, uint32_t rhs,
                                             std::vector<int64_t> &want) {
  const auto &l = shape(lhs), &r = shape(rhs);
  INSTR_CHECK(l.size() >= 2,
              "lhs must be [..., M, K], got " << shapeString(l));
  INSTR_CHECK(r.size() == 2, "rhs must be a matrix, got " << shapeString(r));
  const bool t = ins.transpose_rhs();
  const int64_t k = t ? r[1] : r[0], n = t ? r[0] : r[1];
  INSTR_CHECK(l.back() == k, "contracting dimensions differ: lhs "
                                 << shapeString(l) << " has K = " << l.back()
                                 << ", rhs " << shapeString(r) << " has K = "
                                 << k << (t ? " (rhs transposed)" : ""));
  want.assign(l.begin(), l.end() - 1);
  want.push_back(n);
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
    std::vector<int64_t> want;
    LOOM_RETURN_IF_ERROR(matmulResultShape(inputs[0], inputs[1], want));
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
    // An optional second output: the f32 log-sum-exp [B, NH, T] the
    // gradient reads (then no scratch: the statistics go there).
    LOOM_RETURN_IF_ERROR(counts(1, 1, 1, 1, 2));
    LOOM_RETURN_IF_ERROR(floating(inputs[0], "qkv"));
    LOOM_RETURN_IF_ERROR(floating(outputs[0], "result"));
    const auto &q = shape(inputs[0]);
    LOOM_RETURN_IF_ERROR(checkAttentionShape(q, shape(outputs[0]), "result"));
    if (outputs.size() == 2)
      LOOM_RETURN_IF_ERROR(checkAttentionRowStats(q, outputs[1], "lse"));
    if (!scratch.empty()) {
      // The row statistics (a flash kernel's log-sum-exp).
      LOOM_RETURN_IF_ERROR(floating(scratch[0], "scratch (row stats)"));
      const int64_t s = shapeNumel(shape(scratch[0])), NH = ins.num_heads();
      INSTR_CHECK(s == q[0] * NH * q[1], "scratch (row stats) has "
                                             << s << " elements, expected "
                                             << "B*NH*T = " << q[0] << "*"
                                             << NH << "*" << q[1]);
    }
    return Status::success();
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
    std::vector<int64_t> want;
    LOOM_RETURN_IF_ERROR(matmulResultShape(inputs[1], inputs[2], want));
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
    // dout, qkv and optionally the forward's saved output and log-sum-exp.
    // The gradient recomputes the rest: in its scratch when the program
    // plans one (F32: the row dot products [B, NH, T], and without saved
    // operands the flash backward's recomputed output [B, T, C] and
    // log-sum-exp [B, NH, T] before them), else in the kernels' own
    // workspace.
    LOOM_RETURN_IF_ERROR(counts(2, 4, 1, 1));
    INSTR_CHECK(inputs.size() != 3,
                "AttentionGrad takes dout, qkv and optionally both the "
                "forward's output and log-sum-exp, got 3 inputs");
    const bool saved = inputs.size() == 4;
    LOOM_RETURN_IF_ERROR(allFloat(inputs, "operand"));
    LOOM_RETURN_IF_ERROR(floating(outputs[0], "dqkv"));
    const auto &q = shape(inputs[1]);
    LOOM_RETURN_IF_ERROR(checkAttentionShape(q, shape(inputs[0]), "dout"));
    if (saved) {
      LOOM_RETURN_IF_ERROR(sameShape(inputs[2], shape(inputs[0]),
                                     "saved out (the forward's result)"));
      LOOM_RETURN_IF_ERROR(checkAttentionRowStats(q, inputs[3], "saved lse"));
    }
    if (!scratch.empty()) {
      const auto &d = shape(inputs[0]);
      const int64_t rows = d[0] * ins.num_heads() * d[1];
      LOOM_RETURN_IF_ERROR(dtype(scratch[0], DType::F32, "scratch"));
      if (saved)
        LOOM_RETURN_IF_ERROR(
            numel(scratch[0], rows, "scratch (row dot products [B, NH, T])"));
      else
        LOOM_RETURN_IF_ERROR(
            numel(scratch[0], shapeNumel(d) + 2 * rows,
                  "scratch (the recomputed output [B, T, C], log-sum-exp and "
                  "row dot products [B, NH, T])"));
    }
    return sameShape(outputs[0], q, "dqkv");
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
  // A kernel may need the probabilities [B, NH, T, T] (the naive CUDA
  // ones take them as a runtime temporary): their count must be
  // representable.
  int64_t probs = 0;
  INSTR_CHECK(!__builtin_mul_overflow(q[0] * NH, q[1], &probs) &&
                  !__builtin_mul_overflow(probs, q[1], &probs) &&
                  probs <= std::numeric_limits<int64_t>::max() / 8,
              "attention probabilities B*NH*T*T = " << q[0] << "*" << NH << "*"
                                                    << q[1] << "*" << q[1]
                                                    << " overflow");
  return Status::success();
}

Status InstructionChecker::checkAttentionRowStats(const std::vector<int64_t> &q,
                                                  uint32_t b,
                                                  const char *role) {
  LOOM_RETURN_IF_ERROR(dtype(b, DType::F32, role));
  return sameShape(b, {q[0], static_cast<int64_t>(ins.num_heads()), q[1]},
                   role);
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

} // namespace loom::program::detail
