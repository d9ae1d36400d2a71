//===- PoisonedMemory.h - Buffer memory the host may not touch --*- C++ -*-===//
//
// A device backend's buffer pointers cannot be dereferenced on the host, and
// its kernels cannot read host memory. Without a GPU the runtime tests play
// the device with these two classes: PoisonedMemory keeps every allocation
// (arena, temporaries, the communicator's staging) PROT_NONE except while
// one of its own copies or a kernel runs, and GuardedKernels refuses any
// pointer outside those allocations before running the CPU kernel. A host
// read or write of buffer memory then faults (so a test can fail), and a
// host pointer handed to a kernel or to a buffer copy is an error.
// BufferMemoryTest drives the executor on them; GuardedRun.cpp drives the
// whole loom-run flow (training_run.h) on them.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_RUNTIME_POISONEDMEMORY_H
#define LOOM_TEST_RUNTIME_POISONEDMEMORY_H

#include "runtime/core/buffer_memory.h"
#include "runtime/core/kernel_backend.h"
#include "runtime/cpu/cpu_kernels.h"

#include <cstring>
#include <map>
#include <sys/mman.h>

namespace loom::test {

/// What the guarded classes did in this process (GuardedRun prints it, so a
/// run that silently fell back to host memory shows zeros).
struct GuardCounters {
  uint64_t allocations = 0, copies = 0, kernelCalls = 0;
};
inline GuardCounters &guardCounters() {
  static GuardCounters counters;
  return counters;
}

/// Buffer memory the host cannot touch between the calls that may.
class PoisonedMemory final : public BufferMemory {
public:
  Status allocate(uint64_t bytes, uint8_t *&base) override {
    base = nullptr;
    if (bytes == 0)
      return Status::success();
    void *p =
        ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    LOOM_CHECK(p != MAP_FAILED, "mmap of " << bytes << " bytes failed");
    base = static_cast<uint8_t *>(p);
    blocks[base] = bytes;
    ++guardCounters().allocations;
    return Status::success();
  }
  void release(uint8_t *base, uint64_t bytes) override {
    if (!base)
      return;
    ::munmap(base, bytes);
    blocks.erase(base);
  }
  Status copyIn(void *dst, const void *hostSrc, uint64_t bytes) override {
    LOOM_RETURN_IF_ERROR(check("copyIn", dst, bytes));
    Open open(*this);
    ++guardCounters().copies;
    std::memcpy(dst, hostSrc, bytes);
    return Status::success();
  }
  Status copyOut(void *hostDst, const void *src, uint64_t bytes) override {
    LOOM_RETURN_IF_ERROR(check("copyOut", src, bytes));
    Open open(*this);
    ++guardCounters().copies;
    std::memcpy(hostDst, src, bytes);
    return Status::success();
  }
  Status copy(void *dst, const void *src, uint64_t bytes) override {
    LOOM_RETURN_IF_ERROR(check("copy", dst, bytes));
    LOOM_RETURN_IF_ERROR(check("copy", src, bytes));
    Open open(*this);
    ++guardCounters().copies;
    std::memmove(dst, src, bytes);
    return Status::success();
  }
  Status fillZero(void *dst, uint64_t bytes) override {
    LOOM_RETURN_IF_ERROR(check("fillZero", dst, bytes));
    Open open(*this);
    std::memset(dst, 0, bytes);
    return Status::success();
  }
  Status synchronize() override { return Status::success(); }

  /// Errors unless [p, p + bytes) lies in one allocation.
  Status check(const char *what, const void *p, uint64_t bytes = 1) const {
    const auto *at = static_cast<const uint8_t *>(p);
    auto it = blocks.upper_bound(const_cast<uint8_t *>(at));
    if (it != blocks.begin()) {
      --it;
      if (at >= it->first && at + bytes <= it->first + it->second)
        return Status::success();
    }
    LOOM_ERROR(what << ": pointer " << p << " (" << bytes
                    << " bytes) is not buffer memory");
  }

  /// Host access to every allocation while alive (kernels, copies, and the
  /// test's own inspection).
  class Open {
  public:
    explicit Open(PoisonedMemory &m) : mem(m) {
      mem.protect(PROT_READ | PROT_WRITE);
    }
    ~Open() { mem.protect(PROT_NONE); }

  private:
    PoisonedMemory &mem;
  };

private:
  void protect(int prot) {
    for (const auto &[base, bytes] : blocks)
      ::mprotect(base, bytes, prot);
  }
  std::map<uint8_t *, uint64_t> blocks;
};

/// The CPU kernels, run only on PoisonedMemory pointers.
class GuardedKernels final : public KernelBackend {
public:
  explicit GuardedKernels(PoisonedMemory &m) : mem(m) {}

  /// Runs `f` on the CPU kernels when every non-null pointer is buffer
  /// memory.
  template <typename F>
  Status guard(const char *what, std::initializer_list<const void *> ptrs,
               F &&f) {
    for (const void *p : ptrs)
      if (p)
        LOOM_RETURN_IF_ERROR(mem.check(what, p));
    PoisonedMemory::Open open(mem);
    ++guardCounters().kernelCalls;
    return f(cpu);
  }

#define LOOM_POINTERS(...) {__VA_ARGS__}
#define LOOM_GUARD(NAME, PTRS, CALL)                                           \
  return guard(#NAME, LOOM_POINTERS PTRS,                                      \
               [&](cpu::CpuKernels &k) { return k.CALL; })

  Status embeddingForward(float *out, const int32_t *ids, const float *table,
                          int64_t N, int64_t V, int64_t C) override {
    LOOM_GUARD(embeddingForward, (out, ids, table),
               embeddingForward(out, ids, table, N, V, C));
  }
  Status embeddingForwardRows(float *out, const int32_t *ids, const float *rows,
                              int64_t N, int64_t V, int64_t rowOffset,
                              int64_t rowCount, int64_t C) override {
    LOOM_GUARD(
        embeddingForwardRows, (out, ids, rows),
        embeddingForwardRows(out, ids, rows, N, V, rowOffset, rowCount, C));
  }
  Status embeddingBackward(float *dtable, const float *dout, const int32_t *ids,
                           int64_t N, int64_t V, int64_t C) override {
    LOOM_GUARD(embeddingBackward, (dtable, dout, ids),
               embeddingBackward(dtable, dout, ids, N, V, C));
  }
  Status add(float *out, const float *a, const float *b, int64_t n) override {
    LOOM_GUARD(add, (out, a, b), add(out, a, b, n));
  }
  Status addBroadcast(float *out, const float *a, const float *b, int64_t outer,
                      int64_t inner) override {
    LOOM_GUARD(addBroadcast, (out, a, b),
               addBroadcast(out, a, b, outer, inner));
  }
  Status reduceLeading(float *db, const float *dout, int64_t outer,
                       int64_t inner) override {
    LOOM_GUARD(reduceLeading, (db, dout),
               reduceLeading(db, dout, outer, inner));
  }
  Status linearForward(float *out, const float *inp, const float *weight,
                       const float *bias, int64_t M, int64_t K,
                       int64_t N) override {
    LOOM_GUARD(linearForward, (out, inp, weight, bias),
               linearForward(out, inp, weight, bias, M, K, N));
  }
  Status gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
              float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc) override {
    LOOM_GUARD(
        gemm, (A, B, C),
        gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
  }
  Status columnSum(float *dbias, const float *dout, int64_t M,
                   int64_t N) override {
    LOOM_GUARD(columnSum, (dbias, dout), columnSum(dbias, dout, M, N));
  }
  Status layernormForward(float *out, float *mean, float *rstd,
                          const float *inp, const float *weight,
                          const float *bias, int64_t N, int64_t C,
                          float eps) override {
    LOOM_GUARD(layernormForward, (out, mean, rstd, inp, weight, bias),
               layernormForward(out, mean, rstd, inp, weight, bias, N, C, eps));
  }
  Status layernormGrad(float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight,
                       float *mean, float *rstd, int64_t N, int64_t C,
                       float eps) override {
    LOOM_GUARD(layernormGrad,
               (dinp, dweight, dbias, dout, inp, weight, mean, rstd),
               layernormGrad(dinp, dweight, dbias, dout, inp, weight, mean,
                             rstd, N, C, eps));
  }
  Status geluForward(float *out, const float *inp, int64_t n) override {
    LOOM_GUARD(geluForward, (out, inp), geluForward(out, inp, n));
  }
  Status geluBackward(float *dinp, const float *inp, const float *dout,
                      int64_t n) override {
    LOOM_GUARD(geluBackward, (dinp, inp, dout),
               geluBackward(dinp, inp, dout, n));
  }
  Status softmaxForward(float *out, const float *inp, int64_t N,
                        int64_t C) override {
    LOOM_GUARD(softmaxForward, (out, inp), softmaxForward(out, inp, N, C));
  }
  Status softmaxBackward(float *dinp, const float *dout, const float *out,
                         int64_t N, int64_t C) override {
    LOOM_GUARD(softmaxBackward, (dinp, dout, out),
               softmaxBackward(dinp, dout, out, N, C));
  }
  int64_t attentionScratchFloats(int64_t B, int64_t T, int64_t C, int64_t NH,
                                 bool grad, bool saved) const override {
    return cpu.attentionScratchFloats(B, T, C, NH, grad, saved);
  }
  Status attentionForward(float *out, float *lse, float *att, const float *qkv,
                          int64_t B, int64_t T, int64_t C,
                          int64_t NH) override {
    LOOM_GUARD(attentionForward, (out, lse, att, qkv),
               attentionForward(out, lse, att, qkv, B, T, C, NH));
  }
  Status attentionGrad(float *dqkv, const float *dout, const float *qkv,
                       const float *out, const float *lse, float *att,
                       int64_t B, int64_t T, int64_t C, int64_t NH) override {
    LOOM_GUARD(attentionGrad, (dqkv, dout, qkv, out, lse, att),
               attentionGrad(dqkv, dout, qkv, out, lse, att, B, T, C, NH));
  }
  Status crossEntropyForward(float *loss, float *losses, const float *logits,
                             const int32_t *targets, int64_t N, int64_t V,
                             int64_t validV, double tokens) override {
    LOOM_GUARD(crossEntropyForward, (loss, losses, logits, targets),
               crossEntropyForward(loss, losses, logits, targets, N, V, validV,
                                   tokens));
  }
  Status crossEntropyBackward(float *dlogits, const float *dloss,
                              const float *logits, const int32_t *targets,
                              int64_t N, int64_t V, int64_t validV,
                              double tokens) override {
    LOOM_GUARD(crossEntropyBackward, (dlogits, dloss, logits, targets),
               crossEntropyBackward(dlogits, dloss, logits, targets, N, V,
                                    validV, tokens));
  }
  Status crossEntropyRowMax(float *rowMax, const float *logits, int64_t N,
                            int64_t V, int64_t offset,
                            int64_t validV) override {
    LOOM_GUARD(crossEntropyRowMax, (rowMax, logits),
               crossEntropyRowMax(rowMax, logits, N, V, offset, validV));
  }
  Status crossEntropySums(float *sumExp, float *targetLogit,
                          const float *logits, const float *rowMax,
                          const int32_t *targets, int64_t N, int64_t V,
                          int64_t offset, int64_t validV) override {
    LOOM_GUARD(crossEntropySums, (sumExp, targetLogit, logits, rowMax, targets),
               crossEntropySums(sumExp, targetLogit, logits, rowMax, targets, N,
                                V, offset, validV));
  }
  Status crossEntropyFromSums(float *loss, const float *rowMax,
                              const float *sumExp, const float *targetLogit,
                              int64_t N, double tokens) override {
    LOOM_GUARD(
        crossEntropyFromSums, (loss, rowMax, sumExp, targetLogit),
        crossEntropyFromSums(loss, rowMax, sumExp, targetLogit, N, tokens));
  }
  Status crossEntropySumsBackward(float *dlogits, const float *dloss,
                                  const float *logits, const float *rowMax,
                                  const float *sumExp, const int32_t *targets,
                                  int64_t N, int64_t V, int64_t offset,
                                  int64_t validV, double tokens) override {
    LOOM_GUARD(crossEntropySumsBackward,
               (dlogits, dloss, logits, rowMax, sumExp, targets),
               crossEntropySumsBackward(dlogits, dloss, logits, rowMax, sumExp,
                                        targets, N, V, offset, validV, tokens));
  }
  Status copy(void *dst, const void *src, int64_t bytes) override {
    LOOM_GUARD(copy, (dst, src), copy(dst, src, bytes));
  }
  Status fillF32(float *dst, int64_t n, float value) override {
    LOOM_GUARD(fillF32, (dst), fillF32(dst, n, value));
  }
  Status fillI32(int32_t *dst, int64_t n, int32_t value) override {
    LOOM_GUARD(fillI32, (dst), fillI32(dst, n, value));
  }
  Status transpose(void *out, const void *in,
                   const std::vector<int64_t> &inShape,
                   const std::vector<int64_t> &perm,
                   int64_t elemBytes) override {
    LOOM_GUARD(transpose, (out, in),
               transpose(out, in, inShape, perm, elemBytes));
  }
  Status sliceDim(void *out, const void *in,
                  const std::vector<int64_t> &inShape, int64_t dim,
                  int64_t offset, int64_t outExtent,
                  int64_t elemBytes) override {
    LOOM_GUARD(sliceDim, (out, in),
               sliceDim(out, in, inShape, dim, offset, outExtent, elemBytes));
  }
  Status sliceDimGrad(void *out, const void *in,
                      const std::vector<int64_t> &outShape, int64_t dim,
                      int64_t offset, int64_t inExtent,
                      int64_t elemBytes) override {
    LOOM_GUARD(
        sliceDimGrad, (out, in),
        sliceDimGrad(out, in, outShape, dim, offset, inExtent, elemBytes));
  }
  Status concatDim(void *out, const std::vector<const void *> &inputs,
                   const std::vector<int64_t> &extents,
                   const std::vector<int64_t> &outShape, int64_t dim,
                   int64_t elemBytes) override {
    for (const void *p : inputs)
      LOOM_RETURN_IF_ERROR(mem.check("concatDim", p));
    LOOM_GUARD(concatDim, (out),
               concatDim(out, inputs, extents, outShape, dim, elemBytes));
  }
  Status copy2D(void *dst, int64_t dstPitch, const void *src,
                int64_t srcPitch, int64_t rowBytes, int64_t rows) override {
    LOOM_GUARD(copy2D, (dst, src),
               copy2D(dst, dstPitch, src, srcPitch, rowBytes, rows));
  }
  Status packBlocks(void *dst, const void *src,
                    const std::vector<int64_t> &shape, int64_t dim, int64_t n,
                    int64_t elemBytes) override {
    LOOM_GUARD(packBlocks, (dst, src),
               packBlocks(dst, src, shape, dim, n, elemBytes));
  }
  Status unpackBlocks(void *dst, const void *src,
                      const std::vector<int64_t> &blockShape, int64_t dim,
                      int64_t n, int64_t elemBytes) override {
    LOOM_GUARD(unpackBlocks, (dst, src),
               unpackBlocks(dst, src, blockShape, dim, n, elemBytes));
  }
  Status sumSquares(float *out,
                    const std::vector<BufferSpan> &tensors) override {
    for (const BufferSpan &t : tensors)
      LOOM_RETURN_IF_ERROR(mem.check("sumSquares", t.data));
    LOOM_GUARD(sumSquares, (out), sumSquares(out, tensors));
  }
  Status clipCoef(float *norm, float *coef, const float *sumSq,
                  double maxNorm) override {
    LOOM_GUARD(clipCoef, (norm, coef, sumSq),
               clipCoef(norm, coef, sumSq, maxNorm));
  }
  Status adamw(float *params, const float *grads, float *m, float *v, int64_t n,
               const float *lr, const float *step, const float *gradScale,
               const AdamWHyperParams &hyper) override {
    LOOM_GUARD(adamw, (params, grads, m, v, lr, step, gradScale),
               adamw(params, grads, m, v, n, lr, step, gradScale, hyper));
  }
  Status convertF32ToBF16(uint16_t *out, const float *in, int64_t n) override {
    LOOM_GUARD(convertF32ToBF16, (out, in), convertF32ToBF16(out, in, n));
  }
  Status convertBF16ToF32(float *out, const uint16_t *in, int64_t n) override {
    LOOM_GUARD(convertBF16ToF32, (out, in), convertBF16ToF32(out, in, n));
  }
  bool handlesBF16Natively(program::Opcode op) const override {
    return cpu.handlesBF16Natively(op);
  }
  Status runBF16Natively(const program::Instruction &ins,
                         const std::vector<TypedOperand> &inputs,
                         const std::vector<TypedOperand> &outputs,
                         const std::vector<TypedOperand> &scratch,
                         const BF16InstructionContext &context) override {
    for (const auto *list : {&inputs, &outputs, &scratch})
      for (const TypedOperand &t : *list)
        LOOM_RETURN_IF_ERROR(mem.check("runBF16Natively", t.data));
    LOOM_GUARD(runBF16Natively, (),
               runBF16Natively(ins, inputs, outputs, scratch, context));
  }
#undef LOOM_GUARD
#undef LOOM_POINTERS

private:
  PoisonedMemory &mem;
  cpu::CpuKernels cpu;
};

} // namespace loom::test

#endif // LOOM_TEST_RUNTIME_POISONEDMEMORY_H
