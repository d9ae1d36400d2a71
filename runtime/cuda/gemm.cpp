//===- gemm.cpp - Row-major GEMMs through cuBLASLt: fp32 and bf16 ---------===//
//
// 1. Validate the arguments (types, bias alignment) with a message that says
//    which GEMM and how to fix it.
// 2. Look the shape up in the plan cache; on a miss create the descriptors
//    (operation, three layouts, preference with the real pointer
//    alignments) and ask the heuristic for its best algorithm.
// 3. Point the cached operation at this call's bias or bias gradient (and
//    GELU epilogue companion) and run cublasLtMatmul.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/gemm.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_libraries.h"

#include <cublasLt.h>

namespace loom::cuda {

//===----------------------------------------------------------------------===//
// GemmPlan: the descriptors and algorithm of one call shape
//===----------------------------------------------------------------------===//

/// Owns the cuBLASLt descriptors of one shape (destroyed on every path).
class GemmPlan {
public:
  ~GemmPlan() {
    if (c)
      cublasLtMatrixLayoutDestroy(c);
    if (b)
      cublasLtMatrixLayoutDestroy(b);
    if (a)
      cublasLtMatrixLayoutDestroy(a);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  /// cublasLtMatmul refused the heuristic's algorithm for this epilogue
  /// (tryMatmul): every later call of the shape runs another way.
  bool refusedAtRun = false;
};

namespace {

cudaDataType_t cudaType(GemmType t) {
  return t == GemmType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

const char *typeName(GemmType t) { return t == GemmType::BF16 ? "bf16" : "fp32"; }

cublasLtEpilogue_t epilogueOf(const GemmArgs &g) {
  if (g.biasGradient)
    // cuBLASLt's A is our B (the operand swap of gemm.h): the sums of its
    // op over k, one per row of cuBLASLt's D, i.e. per column of our C.
    return CUBLASLT_EPILOGUE_BGRADA;
  switch (g.activation) {
  case GemmActivation::Gelu:
    return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                  : CUBLASLT_EPILOGUE_GELU_AUX;
  case GemmActivation::GeluOnly:
    return g.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  case GemmActivation::GeluGrad:
    return CUBLASLT_EPILOGUE_DGELU;
  case GemmActivation::None:
    break;
  }
  return g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

/// Whether the call asks for an epilogue its caller can do without (a
/// GELU or a bias gradient: tryMatmul's).
bool optionalEpilogue(const GemmArgs &g) {
  return g.activation != GemmActivation::None || g.biasGradient;
}

/// Whether the epilogue reads or writes the auxiliary matrix (the
/// pre-activation).
bool usesAux(const GemmArgs &g) {
  return g.activation == GemmActivation::Gelu ||
         g.activation == GemmActivation::GeluGrad;
}

/// Why a GELU or bias-gradient epilogue cannot take these arguments
/// (cuBLASLt's rules for the auxiliary matrix and the bias vector), or null.
const char *epilogueMismatch(const GemmArgs &g) {
  if (g.biasGradient) {
    if (g.bias || g.activation != GemmActivation::None)
      return "the bias-gradient epilogue takes no bias and no activation";
    if (reinterpret_cast<uintptr_t>(g.biasGradient) % 16 != 0)
      return "the bias gradient is not 16-byte aligned";
    if (g.alpha != 1.0f || g.beta != 0.0f)
      // What cuBLASLt's sums would mean then is not documented.
      return "the bias-gradient epilogue needs alpha 1 and beta 0";
    return nullptr;
  }
  if (g.activation == GemmActivation::None)
    return nullptr;
  if (g.activation == GemmActivation::GeluOnly)
    return g.aux ? "the GELU-only epilogue keeps no pre-activation (aux); "
                   "use the GELU epilogue to keep it"
                 : nullptr;
  if (!g.aux)
    return "a GELU epilogue needs its pre-activation matrix (aux)";
  if (reinterpret_cast<uintptr_t>(g.aux) % 16 != 0)
    return "the GELU epilogue's pre-activation matrix is not 16-byte aligned";
  if (g.ldaux % 8 != 0 || g.ldaux < g.N)
    return "the GELU epilogue's pre-activation leading dimension is not a "
           "multiple of 8 at least N";
  if (g.activation == GemmActivation::GeluGrad && g.bias)
    return "the GELU gradient epilogue takes no bias";
  return nullptr;
}

/// The largest power of two (at most 256, cuBLASLt's default assumption)
/// dividing the address: the heuristic must not pick a kernel that needs
/// more alignment than an arena offset gives.
int alignmentOf(const void *p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && addr % align != 0)
    align /= 2;
  return align;
}

/// Destroys a preference on every path.
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// Gemm
//===----------------------------------------------------------------------===//

Gemm::Gemm() = default;

Status Gemm::create(Gemm &out) {
  LOOM_CHECK(!out.handle, "cuBLASLt handle already created");
  LOOM_RETURN_IF_ERROR(loadCublasLt());
  LOOM_CUBLAS_CHECK(cublasLtCreate(&out.handle));
  out.workspaceBytes = size_t(32) << 20;
  LOOM_CUDA_CHECK(cudaMalloc(&out.workspace, out.workspaceBytes));
  return Status::success();
}

Gemm::~Gemm() {
  plans.clear();
  if (workspace)
    cudaFree(workspace);
  if (handle)
    cublasLtDestroy(handle);
}

Status Gemm::planFor(const GemmArgs &g, GemmPlan *&plan) {
  const int alignA = alignmentOf(g.A), alignB = alignmentOf(g.B),
            alignC = alignmentOf(g.C);
  const int alignAux = g.aux ? alignmentOf(g.aux) : 0;
  const PlanKey key{g.transA,
                    g.transB,
                    g.M,
                    g.N,
                    g.K,
                    g.lda,
                    g.ldb,
                    g.ldc,
                    int(g.inputType),
                    int(g.outputType),
                    g.bias != nullptr,
                    alignA,
                    alignB,
                    alignC,
                    int(g.activation),
                    g.ldaux,
                    alignAux,
                    g.biasGradient != nullptr};
  auto it = plans.find(key);
  if (it != plans.end()) {
    plan = it->second.get();
    return Status::success();
  }
  auto p = std::make_unique<GemmPlan>();
  // Column-major view: C^T[N,M] = op(B)^T[N,K] op(A)^T[K,M]. The first
  // cuBLASLt operand is B as stored (N x K column-major when not transposed,
  // i.e. row-major [K,N] with stride ldb), the second is A.
  LOOM_CUBLAS_CHECK(
      cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opFirst = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opSecond = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
      p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst, sizeof(opFirst)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
      p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond, sizeof(opSecond)));
  const cublasLtEpilogue_t epilogue = epilogueOf(g);
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    // The bias and the GELU pre-activation have C's element type
    // (cuBLASLt's default for non-fp8).
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (usesAux(g)) {
    // The heuristic reads the pointer's alignment; each call sets its own.
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
        sizeof(g.aux)));
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g.ldaux,
        sizeof(g.ldaux)));
  }
  // Stored shapes (rows x cols, column-major, leading dimension).
  const cudaDataType_t in = cudaType(g.inputType), out = cudaType(g.outputType);
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &p->a, in, g.transB ? g.K : g.N, g.transB ? g.N : g.K, g.ldb));
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &p->b, in, g.transA ? g.M : g.K, g.transA ? g.K : g.M, g.lda));
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, out, g.N, g.M, g.ldc));

  Preference pref;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.pref));
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
      sizeof(workspaceBytes)));
  // cuBLASLt's first operand is B, its second A; C and D are the same.
  const uint32_t aBytes = alignB, bBytes = alignA, cBytes = alignC;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aBytes,
      sizeof(aBytes)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &bBytes,
      sizeof(bBytes)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &cBytes,
      sizeof(cBytes)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &cBytes,
      sizeof(cBytes)));
  if (g.outputType == GemmType::BF16) {
    // Split-K algorithms may reduce their partial sums in the output's
    // type (in place in D, or in an output-typed workspace): with a bf16
    // D that rounds every partial sum. Only fp32 reductions keep the
    // contract of one rounding of the fp32 result.
    const uint32_t schemes =
        CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
        sizeof(schemes)));
  }
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t searched = cublasLtMatmulAlgoGetHeuristic(
      handle, p->op, p->a, p->b, p->c, p->c, pref.pref, 1, &heuristic, &found);
  if (searched == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) {
    // Remembered as a null plan: the next call of the shape asks no more.
    plan = nullptr;
    plans.emplace(key, nullptr);
    return Status::success();
  }
  LOOM_CUBLAS_CHECK(searched);
  p->algo = heuristic.algo;
  plan = p.get();
  plans.emplace(key, std::move(p));
  return Status::success();
}

Status Gemm::checkArgs(const GemmArgs &g) const {
  LOOM_CHECK(handle, "Gemm used before Gemm::create");
  LOOM_CHECK(g.inputType == GemmType::BF16 || g.outputType == GemmType::F32,
             "GEMM " << g.M << "x" << g.N << "x" << g.K
                     << ": fp32 inputs need an fp32 output, got bf16; "
                        "convert the inputs to bf16 or ask for fp32 output");
  LOOM_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0,
             "GEMM with a negative size " << g.M << "x" << g.N << "x" << g.K);
  LOOM_CHECK(!g.bias || reinterpret_cast<uintptr_t>(g.bias) % 16 == 0,
             "GEMM " << g.M << "x" << g.N << "x" << g.K
                     << ": the bias pointer " << g.bias
                     << " is not 16-byte aligned, which cuBLASLt's bias "
                        "epilogue requires; add the bias separately");
  return Status::success();
}

Status Gemm::matmul(const GemmArgs &g, cudaStream_t stream) {
  bool ran = false;
  LOOM_RETURN_IF_ERROR(tryMatmul(g, stream, ran));
  const char *why = epilogueMismatch(g);
  LOOM_CHECK(
      ran,
      "cuBLASLt has no algorithm for a "
          << typeName(g.inputType) << " -> " << typeName(g.outputType) << " "
          << g.M << "x" << g.N << "x" << g.K << " GEMM (lda " << g.lda
          << ", ldb " << g.ldb << ", ldc " << g.ldc << (g.bias ? ", bias" : "")
          << (g.activation == GemmActivation::None ? "" : ", GELU epilogue")
          << (g.biasGradient ? ", bias-gradient epilogue" : "") << ")"
          << (why ? std::string(": ") + why : std::string()));
  return Status::success();
}

Status Gemm::prepare(const GemmArgs &g, GemmPlan *&plan, bool &runnable) {
  plan = nullptr;
  runnable = false;
  LOOM_RETURN_IF_ERROR(checkArgs(g));
  if (epilogueMismatch(g))
    return Status::success();
  if (g.M > 0 && g.N > 0)
    LOOM_RETURN_IF_ERROR(planFor(g, plan));
  if (plan && plan->refusedAtRun)
    plan = nullptr;
  runnable = plan || g.M == 0 || g.N == 0;
  return Status::success();
}

Status Gemm::canRun(const GemmArgs &g, bool &ok) {
  GemmPlan *plan = nullptr;
  return prepare(g, plan, ok);
}

Status Gemm::tryMatmul(const GemmArgs &g, cudaStream_t stream, bool &ran) {
  // 1. Arguments; 2. the cached plan of this shape (none for an empty
  // GEMM, which is done).
  GemmPlan *plan = nullptr;
  LOOM_RETURN_IF_ERROR(prepare(g, plan, ran));
  if (!plan)
    return Status::success();
  // 3. Run. K == 0 gives C = beta C (+ bias), which cuBLASLt also handles.
  // The bias vector, read (BIAS epilogues) or written (BGRADA).
  const void *biasVector = g.biasGradient ? g.biasGradient : g.bias;
  if (biasVector)
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &biasVector,
        sizeof(biasVector)));
  if (usesAux(g))
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
        sizeof(g.aux)));
  const cublasStatus_t status = cublasLtMatmul(
      handle, plan->op, &g.alpha, g.B, plan->a, g.A, plan->b, &g.beta, g.C,
      plan->c, g.C, plan->c, &plan->algo, workspace, workspaceBytes, stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && optionalEpilogue(g)) {
    // The heuristic offered an algorithm the call then refused: nothing
    // was enqueued, and the caller runs the epilogue's work its own way,
    // now and for every later call of the shape, rather than the run
    // failing on an epilogue it can do without.
    plan->refusedAtRun = true;
    ran = false;
    return Status::success();
  }
  LOOM_CUBLAS_CHECK(status);
  return Status::success();
}

Status Gemm::gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float beta, float *C, int64_t ldc,
                  cudaStream_t stream) {
  GemmArgs g;
  g.transA = transA, g.transB = transB, g.M = M, g.N = N, g.K = K;
  g.alpha = alpha, g.beta = beta;
  g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc;
  return matmul(g, stream);
}

Status Gemm::gemmBf16(bool transA, bool transB, int64_t M, int64_t N,
                      int64_t K, float alpha, const __nv_bfloat16 *A,
                      int64_t lda, const __nv_bfloat16 *B, int64_t ldb,
                      float beta, __nv_bfloat16 *C, int64_t ldc,
                      const __nv_bfloat16 *bias, cudaStream_t stream) {
  GemmArgs g;
  g.transA = transA, g.transB = transB, g.M = M, g.N = N, g.K = K;
  g.alpha = alpha, g.beta = beta;
  g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc;
  g.inputType = GemmType::BF16, g.outputType = GemmType::BF16, g.bias = bias;
  return matmul(g, stream);
}

Status Gemm::gemmBf16(bool transA, bool transB, int64_t M, int64_t N,
                      int64_t K, float alpha, const __nv_bfloat16 *A,
                      int64_t lda, const __nv_bfloat16 *B, int64_t ldb,
                      float beta, float *C, int64_t ldc, const float *bias,
                      cudaStream_t stream) {
  GemmArgs g;
  g.transA = transA, g.transB = transB, g.M = M, g.N = N, g.K = K;
  g.alpha = alpha, g.beta = beta;
  g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc;
  g.inputType = GemmType::BF16, g.outputType = GemmType::F32, g.bias = bias;
  return matmul(g, stream);
}

} // namespace loom::cuda
