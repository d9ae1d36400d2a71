//===- executor_instruction.cpp - One instruction of Executor ---*- C++ -*-===//
//
// Each instruction maps to one KernelBackend call (cpu::CpuKernels); when an
// output shares bytes with an input and the kernel cannot run in place, the
// result is computed into a staging temporary and copied (the memory this
// costs is reported by peakTensorBytes). Gradient kernels overwrite their
// outputs (parameter gradients that the CPU kernels accumulate are zeroed
// first) and recompute LayerNorm statistics / attention probabilities into
// their scratch, so the backward never depends on what the forward left in
// the arena besides its named activations.
//
// Mixed precision (bf16_staging.h): an instruction with BF16 operands runs its
// fp32 kernel on fp32 copies in the executor's staging memory (allocated once
// at load, as large as the largest instruction needs) and rounds its BF16
// results back; Cast converts; a parameter with a master buffer starts with
// fp32 values in the master and their bf16 rounding in its buffer.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/executor.h"

#include "runtime/core/bf16_staging.h"
#include "runtime/program/in_place.h"

#include <algorithm>
#include <utility>

namespace loom {

using program::DType;
using program::Opcode;

//===----------------------------------------------------------------------===//
// One instruction
//===----------------------------------------------------------------------===//

using Range = program::BufferRange;

Status Executor::runInstruction(const program::Instruction &ins) {
  std::vector<uint32_t> in, out, scr;
  if (ins.inputs())
    in.assign(ins.inputs()->begin(), ins.inputs()->end());
  if (ins.outputs())
    out.assign(ins.outputs()->begin(), ins.outputs()->end());
  if (ins.scratch())
    scr.assign(ins.scratch()->begin(), ins.scratch()->end());
  auto i32 = [&](uint32_t b) { return static_cast<int32_t *>(bufferData(b)); };

  const Opcode op = ins.opcode();
  // An all-reduce writes its outputs itself (in place, or unpacked from a
  // bucket, possibly after it completes in flight).
  if (op == Opcode::AllReduce)
    return runAllReduce(ins, in, out, scr);
  if (op == Opcode::ReduceScatter && in.size() > 1)
    return runReduceScatterBucket(ins, in, out, scr);
  if (op == Opcode::ReduceScatter && ins.last_microbatch_only())
    return runReduceScatterInPlace(ins, in, scr);
  if (op == Opcode::AllGather && in.size() > 1)
    return runAllGatherBucket(ins, in, out, scr);
  // A Wait's work, completing the collectives in flight on its inputs, was
  // done before it ran (completeInFlight): it touches their bytes.
  if (op == Opcode::Wait)
    return Status::success();
  // 0. Mixed precision: a backend that runs the opcode on bf16 itself gets
  //    the buffers as they are; otherwise every BF16 input and scratch is
  //    widened into an fp32 slot of the staging memory, and the kernel
  //    reads (f32) and writes (dsts) the slots instead of the buffers.
  static const BF16StagingPlan kNoStaging;
  const auto planned = bf16Plans.find(&ins);
  const BF16StagingPlan &bf16 =
      planned == bf16Plans.end() ? kNoStaging : planned->second;
  if (!bf16.empty() && kernels->handlesBF16Natively(op))
    return runBF16Natively(ins, in, out, scr);
  auto slotData = [&](int32_t s) {
    return reinterpret_cast<float *>(bf16Staging +
                                     bf16.slots[static_cast<size_t>(s)].offset);
  };
  // What the kernel reads for an input or scratch buffer.
  std::vector<std::pair<uint32_t, float *>> readFrom;
  for (size_t j = 0; j < bf16.inputSlot.size(); ++j)
    if (bf16.inputSlot[j] >= 0)
      readFrom.emplace_back(in[j], slotData(bf16.inputSlot[j]));
  for (size_t j = 0; j < bf16.scratchSlot.size(); ++j)
    if (bf16.scratchSlot[j] >= 0)
      readFrom.emplace_back(scr[j], slotData(bf16.scratchSlot[j]));
  for (size_t s = 0; s < bf16.slots.size(); ++s)
    if (bf16.slots[s].widen)
      LOOM_RETURN_IF_ERROR(kernels->convertBF16ToF32(
          slotData(static_cast<int32_t>(s)),
          static_cast<const uint16_t *>(bufferData(bf16.slots[s].buffer)),
          bf16.slots[s].count));
  auto f32 = [&](uint32_t b) {
    for (const auto &[buffer, data] : readFrom)
      if (buffer == b)
        return data;
    return static_cast<float *>(bufferData(b));
  };
  // 1. Where each output is written: in place, or into a staging temporary
  //    when it shares bytes with an input the kernel still reads. Copy uses
  //    memmove; AdamW updates its state in place by contract.
  std::vector<void *> dsts(out.size());
  std::vector<bool> staged(out.size(), false);
  if (staging.size() < out.size())
    staging.resize(out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    if (!bf16.outputSlot.empty() && bf16.outputSlot[k] >= 0) {
      dsts[k] = slotData(bf16.outputSlot[k]); // rounded back in step 3
      continue;
    }
    const Range r = byteRange(out[k]);
    if (op != Opcode::Copy && op != Opcode::AdamW)
      for (size_t j = 0; j < in.size(); ++j) {
        const Range ri = byteRange(in[j]);
        if (ri.overlaps(r) &&
            !(ri == r && program::outputMayOverwriteInput(op, j)))
          staged[k] = true;
      }
    const int64_t bytes = static_cast<int64_t>(r.bytes());
    dsts[k] = staged[k] ? static_cast<void *>(temp(staging[k], (bytes + 3) / 4))
                        : bufferData(out[k]);
  }
  const uint32_t o = out.empty() ? 0 : out[0];
  void *dst = dsts.empty() ? nullptr : dsts[0];
  float *dstF = static_cast<float *>(dst);
  auto outF = [&](size_t k) { return static_cast<float *>(dsts[k]); };
  const int64_t outBytes =
      out.empty() ? 0 : static_cast<int64_t>(byteRange(o).bytes());

  // 2. The kernel (KernelBackend: this executor's buffer pointers only).
  KernelBackend &k = *kernels;
  switch (op) {
  case Opcode::Embedding: {
    const auto &t = shapes[in[0]];
    if (ins.axes() && ins.axes()->size() > 0) {
      // Vocab-parallel: this rank holds block groupRank(axes) of the rows.
      const std::vector<uint32_t> axes = axesOf(ins);
      const int64_t rows = t[0], n = comm->groupSize(axes);
      LOOM_RETURN_IF_ERROR(k.embeddingForwardRows(
          dstF, i32(in[1]), f32(in[0]), bufferNumel(in[1]), rows * n,
          comm->groupRank(axes) * rows, rows, t[1]));
      break;
    }
    LOOM_RETURN_IF_ERROR(k.embeddingForward(dstF, i32(in[1]), f32(in[0]),
                                            bufferNumel(in[1]), t[0], t[1]));
    break;
  }
  case Opcode::Add: {
    const int64_t inner = bufferNumel(in[1]);
    const int64_t outer = bufferNumel(in[0]) / inner;
    if (outer == 1)
      LOOM_RETURN_IF_ERROR(k.add(dstF, f32(in[0]), f32(in[1]), inner));
    else
      LOOM_RETURN_IF_ERROR(
          k.addBroadcast(dstF, f32(in[0]), f32(in[1]), outer, inner));
    break;
  }
  case Opcode::Linear: {
    // The weight is [K, out...]: its output dimensions are one N.
    const auto &w = shapes[in[1]];
    const int64_t K = w[0], N = bufferNumel(in[1]) / K;
    const int64_t M = bufferNumel(in[0]) / K;
    LOOM_RETURN_IF_ERROR(k.linearForward(dstF, f32(in[0]), f32(in[1]),
                                         in.size() == 3 ? f32(in[2]) : nullptr,
                                         M, K, N));
    break;
  }
  case Opcode::Matmul: {
    const auto &r = shapes[in[1]];
    const bool t = ins.transpose_rhs();
    const int64_t K = t ? r[1] : r[0], N = t ? r[0] : r[1];
    const int64_t M = bufferNumel(in[0]) / K;
    LOOM_RETURN_IF_ERROR(k.gemm(false, t, M, N, K, 1.0f, f32(in[0]), K,
                                f32(in[1]), r[1], 0.0f, dstF, N));
    break;
  }
  case Opcode::LayerNorm: {
    const int64_t C = shapes[in[0]].back();
    const int64_t N = bufferNumel(in[0]) / C;
    float *mean = scr.empty() ? temp(workspace, N) : f32(scr[0]);
    float *rstd = scr.empty() ? temp(workspace2, N) : f32(scr[1]);
    LOOM_RETURN_IF_ERROR(k.layernormForward(dstF, mean, rstd, f32(in[0]),
                                            f32(in[1]), f32(in[2]), N, C,
                                            static_cast<float>(ins.epsilon())));
    break;
  }
  case Opcode::Gelu:
    LOOM_RETURN_IF_ERROR(k.geluForward(dstF, f32(in[0]), bufferNumel(in[0])));
    break;
  case Opcode::Softmax: {
    const int64_t C = shapes[in[0]].back();
    LOOM_RETURN_IF_ERROR(
        k.softmaxForward(dstF, f32(in[0]), bufferNumel(in[0]) / C, C));
    break;
  }
  case Opcode::Attention: {
    // [B, T, 3C] or [B, T, 3, C]: the same bytes.
    const auto &q = shapes[in[0]];
    const int64_t B = q[0], T = q[1], C = q.size() == 4 ? q[3] : q[2] / 3,
                  NH = ins.num_heads();
    // A second output: the log-sum-exp the gradient reads (loom.attention's
    // lse), else the kernel's row statistics go to scratch.
    float *lse = out.size() == 2 ? outF(1) : nullptr;
    LOOM_RETURN_IF_ERROR(k.attentionForward(
        dstF, lse, attentionScratch(B, T, C, NH, false, lse != nullptr, scr),
        f32(in[0]), B, T, C, NH));
    break;
  }
  case Opcode::CrossEntropy: {
    const int64_t V = shapes[in[0]].back();
    const int64_t N = bufferNumel(in[0]) / V;
    // Columns beyond the model's vocabulary are padding (Megatron style).
    const int64_t validV = std::min<int64_t>(V, modelInfo->vocab_size());
    float *losses = scr.empty() ? nullptr : f32(scr[0]);
    // `value` > 0: the global token count (tokens split across ranks).
    LOOM_RETURN_IF_ERROR(k.crossEntropyForward(
        dstF, losses, f32(in[0]), i32(in[1]), N, V, validV, ins.value()));
    break;
  }
  case Opcode::RowMax:
  case Opcode::CrossEntropySums:
  case Opcode::CrossEntropySumsGrad: {
    // This rank's columns of the vocabulary: block groupRank(axes) of it.
    const uint32_t logits = op == Opcode::RowMax ? in[0]
                            : op == Opcode::CrossEntropySums ? in[0]
                                                             : in[1];
    const int64_t V = shapes[logits].back();
    const int64_t N = bufferNumel(logits) / V;
    int64_t offset = 0, blocks = 1;
    if (ins.axes() && ins.axes()->size() > 0) {
      std::vector<uint32_t> axes(ins.axes()->begin(), ins.axes()->end());
      offset = comm->groupRank(axes) * V;
      blocks = comm->groupSize(axes);
    }
    // Columns beyond the model's vocabulary are padding, as for CrossEntropy.
    const int64_t validV = std::min<int64_t>(V * blocks, modelInfo->vocab_size());
    if (op == Opcode::RowMax) {
      LOOM_RETURN_IF_ERROR(
          k.crossEntropyRowMax(dstF, f32(in[0]), N, V, offset, validV));
    } else if (op == Opcode::CrossEntropySums) {
      LOOM_RETURN_IF_ERROR(k.crossEntropySums(outF(0), outF(1), f32(in[0]),
                                              f32(in[1]), i32(in[2]), N, V,
                                              offset, validV));
    } else {
      const double tokens = ins.value() > 0 ? ins.value() : double(N);
      LOOM_RETURN_IF_ERROR(k.crossEntropySumsBackward(
          dstF, f32(in[0]), f32(in[1]), f32(in[2]), f32(in[3]), i32(in[4]), N,
          V, offset, validV, tokens));
    }
    break;
  }
  case Opcode::CrossEntropyFromSums: {
    const int64_t N = bufferNumel(in[0]);
    const double tokens = ins.value() > 0 ? ins.value() : double(N);
    LOOM_RETURN_IF_ERROR(k.crossEntropyFromSums(dstF, f32(in[0]), f32(in[1]),
                                                f32(in[2]), N, tokens));
    break;
  }
  case Opcode::Copy:
    LOOM_RETURN_IF_ERROR(k.copy(dst, bufferData(in[0]), outBytes));
    break;
  case Opcode::Transpose: {
    std::vector<int64_t> perm; // absent for a scalar
    if (ins.permutation())
      perm.assign(ins.permutation()->begin(), ins.permutation()->end());
    LOOM_RETURN_IF_ERROR(k.transpose(dst, bufferData(in[0]), shapes[in[0]],
                                     perm,
                                     program::dtypeBytes(bufferDType(o))));
    break;
  }
  case Opcode::Slice:
    LOOM_RETURN_IF_ERROR(k.sliceDim(
        dst, bufferData(in[0]), shapes[in[0]], ins.dim(), ins.offset(),
        shapes[o][ins.dim()], program::dtypeBytes(bufferDType(o))));
    break;
  case Opcode::LocalSlice: {
    // This rank's block (group-rank order, as AllGather orders blocks); no
    // communication, so nothing is counted.
    const std::vector<uint32_t> axes = axesOf(ins);
    const int64_t dim = ins.dim(), extent = shapes[o][dim];
    LOOM_RETURN_IF_ERROR(k.sliceDim(dst, bufferData(in[0]), shapes[in[0]], dim,
                                    comm->groupRank(axes) * extent, extent,
                                    program::dtypeBytes(bufferDType(o))));
    break;
  }
  case Opcode::Concat: {
    std::vector<const void *> srcs;
    std::vector<int64_t> extents;
    for (uint32_t b : in) {
      srcs.push_back(bufferData(b));
      extents.push_back(shapes[b][ins.dim()]);
    }
    LOOM_RETURN_IF_ERROR(k.concatDim(dst, srcs, extents, shapes[o], ins.dim(),
                                     program::dtypeBytes(bufferDType(o))));
    break;
  }
  case Opcode::EmbeddingGrad: {
    const auto &t = shapes[o];
    LOOM_RETURN_IF_ERROR(k.embeddingBackward(dstF, f32(in[0]), i32(in[1]),
                                             bufferNumel(in[1]), t[0], t[1]));
    break;
  }
  case Opcode::ReduceLeading: {
    const int64_t inner = bufferNumel(o);
    LOOM_RETURN_IF_ERROR(
        k.reduceLeading(dstF, f32(in[0]), bufferNumel(in[0]) / inner, inner));
    break;
  }
  case Opcode::LinearGrad: {
    const auto &w = shapes[in[2]];
    const int64_t K = w[0], N = bufferNumel(in[2]) / K;
    const int64_t M = bufferNumel(in[1]) / K;
    const float *dout = f32(in[0]);
    // dinput[M,K] = dout[M,N] weight^T; dweight[K,N] = input^T dout.
    LOOM_RETURN_IF_ERROR(k.gemm(false, true, M, K, N, 1.0f, dout, N, f32(in[2]),
                                N, 0.0f, outF(0), K));
    LOOM_RETURN_IF_ERROR(k.gemm(true, false, K, N, M, 1.0f, f32(in[1]), K, dout,
                                N, 0.0f, outF(1), N));
    if (out.size() == 3)
      LOOM_RETURN_IF_ERROR(k.columnSum(outF(2), dout, M, N));
    break;
  }
  case Opcode::MatmulGrad: {
    const auto &r = shapes[in[2]];
    const bool t = ins.transpose_rhs();
    const int64_t K = t ? r[1] : r[0], N = t ? r[0] : r[1];
    const int64_t M = bufferNumel(in[1]) / K;
    const float *dout = f32(in[0]), *lhs = f32(in[1]), *rhs = f32(in[2]);
    // out[M,N] = lhs[M,K] op(rhs)[K,N], op(rhs) = rhs^T when transposed.
    // dlhs = dout op(rhs)^T; drhs = lhs^T dout, or dout^T lhs transposed.
    LOOM_RETURN_IF_ERROR(
        k.gemm(false, !t, M, K, N, 1.0f, dout, N, rhs, r[1], 0.0f, outF(0), K));
    if (t)
      LOOM_RETURN_IF_ERROR(k.gemm(true, false, N, K, M, 1.0f, dout, N, lhs, K,
                                  0.0f, outF(1), K));
    else
      LOOM_RETURN_IF_ERROR(k.gemm(true, false, K, N, M, 1.0f, lhs, K, dout, N,
                                  0.0f, outF(1), N));
    break;
  }
  case Opcode::LayerNormGrad: {
    const int64_t C = shapes[in[1]].back();
    const int64_t N = bufferNumel(in[1]) / C;
    float *mean = scr.empty() ? temp(workspace, N) : f32(scr[0]);
    float *rstd = scr.empty() ? temp(workspace2, N) : f32(scr[1]);
    LOOM_RETURN_IF_ERROR(k.layernormGrad(outF(0), outF(1), outF(2), f32(in[0]),
                                         f32(in[1]), f32(in[2]), mean, rstd, N,
                                         C, static_cast<float>(ins.epsilon())));
    break;
  }
  case Opcode::GeluGrad:
    LOOM_RETURN_IF_ERROR(
        k.geluBackward(dstF, f32(in[1]), f32(in[0]), bufferNumel(in[1])));
    break;
  case Opcode::SoftmaxGrad: {
    const int64_t C = shapes[in[1]].back();
    LOOM_RETURN_IF_ERROR(k.softmaxBackward(dstF, f32(in[0]), f32(in[1]),
                                           bufferNumel(in[1]) / C, C));
    break;
  }
  case Opcode::AttentionGrad: {
    const auto &q = shapes[in[1]];
    const int64_t B = q[0], T = q[1], C = q.size() == 4 ? q[3] : q[2] / 3,
                  NH = ins.num_heads();
    // in: dout, qkv and optionally the forward's output and log-sum-exp.
    const bool saved = in.size() == 4;
    LOOM_RETURN_IF_ERROR(k.attentionGrad(
        dstF, f32(in[0]), f32(in[1]), saved ? f32(in[2]) : nullptr,
        saved ? f32(in[3]) : nullptr,
        attentionScratch(B, T, C, NH, true, saved, scr), B, T, C, NH));
    break;
  }
  case Opcode::CrossEntropyGrad: {
    const int64_t V = shapes[in[1]].back();
    const int64_t N = bufferNumel(in[1]) / V;
    const int64_t validV = std::min<int64_t>(V, modelInfo->vocab_size());
    LOOM_RETURN_IF_ERROR(k.crossEntropyBackward(
        dstF, f32(in[0]), f32(in[1]), i32(in[2]), N, V, validV, ins.value()));
    break;
  }
  case Opcode::SliceGrad:
    LOOM_RETURN_IF_ERROR(k.sliceDimGrad(
        dst, bufferData(in[0]), shapes[o], ins.dim(), ins.offset(),
        shapes[in[0]][ins.dim()], program::dtypeBytes(bufferDType(o))));
    break;
  case Opcode::Fill: {
    const int64_t n = bufferNumel(o);
    if (bufferDType(o) == DType::I32)
      LOOM_RETURN_IF_ERROR(k.fillI32(static_cast<int32_t *>(dst), n,
                                     static_cast<int32_t>(ins.value())));
    else
      LOOM_RETURN_IF_ERROR(k.fillF32(dstF, n, static_cast<float>(ins.value())));
    break;
  }
  case Opcode::SumSquares: {
    std::vector<BufferSpan> tensors;
    for (uint32_t b : in)
      tensors.push_back({f32(b), bufferNumel(b)});
    LOOM_RETURN_IF_ERROR(k.sumSquares(dstF, tensors));
    break;
  }
  case Opcode::ClipCoef:
    LOOM_RETURN_IF_ERROR(
        k.clipCoef(outF(0), outF(1), f32(in[0]), ins.max_norm()));
    break;
  case Opcode::AdamW: {
    AdamWHyperParams hyper;
    hyper.beta1 = ins.beta1();
    hyper.beta2 = ins.beta2();
    hyper.eps = ins.adam_eps();
    hyper.weightDecay = ins.weight_decay();
    // The kernel updates in place: an output that is not its input buffer
    // (ZeRO's fresh parameter shard) starts as a copy of it.
    const uint32_t state[3] = {in[0], in[2], in[3]};
    for (size_t j = 0; j < 3; ++j)
      if (outF(j) != f32(state[j]))
        LOOM_RETURN_IF_ERROR(k.copy(outF(j), f32(state[j]),
                                    bufferNumel(state[j]) *
                                        static_cast<int64_t>(sizeof(float))));
    LOOM_RETURN_IF_ERROR(k.adamw(outF(0), f32(in[1]), outF(1), outF(2),
                                 bufferNumel(in[0]), f32(in[4]), f32(in[5]),
                                 f32(in[6]), hyper));
    break;
  }
  case Opcode::Cast: {
    const int64_t n = bufferNumel(in[0]);
    if (bufferDType(o) == DType::BF16)
      LOOM_RETURN_IF_ERROR(
          k.convertF32ToBF16(static_cast<uint16_t *>(dst), f32(in[0]), n));
    else
      LOOM_RETURN_IF_ERROR(k.convertBF16ToF32(
          dstF, static_cast<const uint16_t *>(bufferData(in[0])), n));
    break;
  }
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
  case Opcode::AllToAll:
  case Opcode::Send:
  case Opcode::Recv:
    LOOM_RETURN_IF_ERROR(runCollective(ins, in, out, scr, dst));
    break;
  default:
    LOOM_ERROR("opcode " << program::opcodeName(op)
                         << " cannot run on this runtime");
  }
  // 3. Staged outputs to their buffers; fp32 results of BF16 outputs and
  //    scratch rounded into them.
  for (size_t k = 0; k < out.size(); ++k)
    if (staged[k])
      LOOM_RETURN_IF_ERROR(
          kernels->copy(bufferData(out[k]), dsts[k],
                 static_cast<int64_t>(byteRange(out[k]).bytes())));
  for (size_t s = 0; s < bf16.slots.size(); ++s)
    if (bf16.slots[s].round)
      LOOM_RETURN_IF_ERROR(kernels->convertF32ToBF16(
          static_cast<uint16_t *>(bufferData(bf16.slots[s].buffer)),
          slotData(static_cast<int32_t>(s)), bf16.slots[s].count));
  return Status::success();
}

float *Executor::attentionScratch(int64_t B, int64_t T, int64_t C, int64_t NH,
                                  bool grad, bool saved,
                                  const std::vector<uint32_t> &scr) {
  const int64_t need =
      kernels->attentionScratchFloats(B, T, C, NH, grad, saved);
  if (need == 0)
    return nullptr;
  if (!scr.empty() && bufferDType(scr[0]) == DType::F32 &&
      bufferNumel(scr[0]) >= need)
    return static_cast<float *>(bufferData(scr[0]));
  return temp(workspace, need);
}

Status Executor::runBF16Natively(const program::Instruction &ins,
                                 const std::vector<uint32_t> &in,
                                 const std::vector<uint32_t> &out,
                                 const std::vector<uint32_t> &scr) {
  const Opcode op = ins.opcode();
  auto typed = [&](uint32_t b, void *data) {
    return TypedOperand{data, bufferDType(b), &shapes[b]};
  };
  std::vector<TypedOperand> inputs, outputs, scratch;
  for (uint32_t b : in)
    inputs.push_back(typed(b, bufferData(b)));
  for (uint32_t b : scr)
    scratch.push_back(typed(b, bufferData(b)));
  // An output that overlaps an input other than as the opcode's in-place
  // operand goes to a temporary, copied to its buffer after the kernel (as
  // step 1 of runInstruction does for the fp32 kernels).
  std::vector<bool> staged(out.size(), false);
  if (staging.size() < out.size())
    staging.resize(out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    const Range r = byteRange(out[k]);
    if (op != Opcode::AdamW)
      for (size_t j = 0; j < in.size(); ++j) {
        const Range ri = byteRange(in[j]);
        if (ri.overlaps(r) &&
            !(ri == r && program::outputMayOverwriteInput(op, j)))
          staged[k] = true;
      }
    const int64_t bytes = static_cast<int64_t>(r.bytes());
    outputs.push_back(
        typed(out[k],
              staged[k] ? static_cast<void *>(temp(staging[k], (bytes + 3) / 4))
                        : bufferData(out[k])));
  }
  BF16InstructionContext context;
  context.vocabSize = modelInfo->vocab_size();
  if (ins.axes() && ins.axes()->size() > 0) {
    std::vector<uint32_t> axes(ins.axes()->begin(), ins.axes()->end());
    context.groupRank = comm->groupRank(axes);
    context.groupSize = comm->groupSize(axes);
  }
  LOOM_RETURN_IF_ERROR(
      kernels->runBF16Natively(ins, inputs, outputs, scratch, context));
  for (size_t k = 0; k < out.size(); ++k)
    if (staged[k])
      LOOM_RETURN_IF_ERROR(kernels->copy(
          bufferData(out[k]), outputs[k].data,
          static_cast<int64_t>(byteRange(out[k]).bytes())));
  return Status::success();
}

//===----------------------------------------------------------------------===//
// A group of AdamW updates
//===----------------------------------------------------------------------===//

Status Executor::runAdamWGroup(
    const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>> &list,
    const AdamWGroupPlan &group) {
  for (uint32_t k = group.first; k < group.first + group.count; ++k)
    LOOM_RETURN_IF_ERROR(completeInFlight(list.Get(k)));
  auto f32 = [&](uint32_t b) { return static_cast<float *>(bufferData(b)); };
  std::vector<AdamWGroupMember> members;
  members.reserve(group.members.size());
  for (const AdamWGroupPlan::Member &m : group.members) {
    AdamWGroupMember member;
    member.params = f32(m.params);
    member.grads = bufferData(m.grads);
    member.gradsBF16 = bufferDType(m.grads) == DType::BF16;
    member.m = f32(m.m);
    member.v = f32(m.v);
    if (m.bf16Params >= 0)
      member.bf16Params = static_cast<uint16_t *>(
          bufferData(static_cast<uint32_t>(m.bf16Params)));
    member.n = bufferNumel(m.params);
    member.weightDecay = m.weightDecay;
    members.push_back(member);
  }
  return kernels->adamwGroup(members, f32(group.lr), f32(group.step),
                             f32(group.gradScale), group.hyper);
}

//===----------------------------------------------------------------------===//
// Adjacent instructions in one call
//===----------------------------------------------------------------------===//

Status Executor::runFusedSpan(
    const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>> &list,
    uint32_t first, const FusedSpan &span, bool &ran) {
  const program::Instruction &one = *list.Get(first),
                             &two = *list.Get(first + span.count - 1);
  for (uint32_t k = first; k < first + span.count; ++k)
    LOOM_RETURN_IF_ERROR(completeInFlight(list.Get(k)));
  // What lies between the two (the loss seed's Fill) runs first: the call
  // may read it, and it may run again if the backend declines (the plan
  // made sure it writes nothing the call's instructions read or write).
  for (uint32_t k = first + 1; k + 1 < first + span.count; ++k)
    LOOM_RETURN_IF_ERROR(runInstruction(*list.Get(k)));
  auto typed = [&](uint32_t b) {
    return TypedOperand{bufferData(b), bufferDType(b), &shapes[b]};
  };
  auto typedAll = [&](const flatbuffers::Vector<uint32_t> *buffers) {
    std::vector<TypedOperand> out;
    if (buffers)
      for (uint32_t b : *buffers)
        out.push_back(typed(b));
    return out;
  };
  const std::vector<TypedOperand> in = typedAll(one.inputs()),
                                  out = typedAll(one.outputs()),
                                  scratch = typedAll(one.scratch());
  ran = false;
  switch (span.kind) {
  case FusedKind::LinearGelu:
    // Gelu: in pre, out the GELU.
    return kernels->linearGelu(in, out[0], typed(two.outputs()->Get(0)),
                               /*keepPre=*/!span.firstResultUnread, ran);
  case FusedKind::LinearGradGelu:
    // GeluGrad: in (dout = the LinearGrad's dx, pre), out dpre.
    return kernels->linearGradGelu(in, out, typed(two.inputs()->Get(1)),
                                   typed(two.outputs()->Get(0)), ran);
  case FusedKind::AddLayerNorm:
    // LayerNorm: in (the Add's sum, weight, bias), out y.
    return kernels->addLayerNorm(two, in[0], in[1], out[0],
                                 typedAll(two.inputs()),
                                 typed(two.outputs()->Get(0)), ran);
  case FusedKind::LayerNormGradAdd: {
    // Add: in (residual, dx) or (dx, residual), out the sum.
    const uint32_t dx = one.outputs()->Get(0);
    const uint32_t a = two.inputs()->Get(0), b = two.inputs()->Get(1);
    const uint32_t residual = byteRange(a) == byteRange(dx) ? b : a;
    return kernels->layerNormGradAdd(one, in, out, scratch, typed(residual),
                                     typed(two.outputs()->Get(0)), ran);
  }
  case FusedKind::CrossEntropyWithGrad: {
    BF16InstructionContext context;
    context.vocabSize = modelInfo->vocab_size();
    return kernels->crossEntropyWithGrad(
        one, two, in, out, scratch, typedAll(two.inputs()),
        typed(two.outputs()->Get(0)), context, ran);
  }
  }
  return Status::error("unknown fused instruction span");
}

} // namespace loom
