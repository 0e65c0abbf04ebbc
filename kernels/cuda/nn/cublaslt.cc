// cuBLASLt plumbing for the row-major GEMMs of matmul and linear: one handle and one 32 MiB
// workspace per device (created on first use, kept for the process), and the heuristic's
// algorithm cached per problem so that a training step's repeated shapes ask only once.
//
// cuBLASLt is column-major. A row-major [R, C] matrix is the column-major [C, R] matrix of the
// same memory, so the row-major C = op(A) op(B) is computed as the column-major
// C^T = op(B)^T op(A)^T: cuBLASLt's first operand is our B, its second our A, m = N and n = M.
#include "kernels/cuda/nn/cublaslt.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace merak::cuda_kernels::nn {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// Batches go to cuBLASLt in chunks of at most this many matrices (older releases refused more).
constexpr int64_t kMaxBatch = 65535;

void check_lt(cublasStatus_t st, const char* what, const char* op) {
  MERAK_CHECK(st == CUBLAS_STATUS_SUCCESS, op, ": ", what, " failed: ",
              cublasLtGetStatusString(st), " (cublasStatus ", int(st), ")");
}

struct DeviceLt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

DeviceLt& device_lt(int device, const char* op) {
  static std::mutex mu;
  static std::map<int, DeviceLt> all;
  std::lock_guard<std::mutex> lock(mu);
  DeviceLt& d = all[device];
  if (!d.handle) {
    merak::cuda::check(cudaSetDevice(device), "cudaSetDevice");
    if (!d.workspace)
      merak::cuda::check(cudaMalloc(&d.workspace, kWorkspaceBytes),
                         "cudaMalloc (cuBLASLt workspace)");
    check_lt(cublasLtCreate(&d.handle), "cublasLtCreate", op);
  }
  return d;
}

bool tf32_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MERAK_CUDA_TF32");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

cudaDataType_t data_type(Elem e) {
  switch (e) {
    case Elem::BF16: return CUDA_R_16BF;
    case Elem::F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// The largest power of two up to 256 dividing the address of every matrix of a batch.
uint32_t alignment(const void* p, int64_t stride_bytes) {
  const uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(p)) | uint64_t(stride_bytes);
  uint32_t a = 256;
  while (a > 1 && bits % a != 0) a /= 2;
  return a;
}

// Descriptors, destroyed with their scope.
struct MatmulDesc {
  cublasLtMatmulDesc_t h = nullptr;
  ~MatmulDesc() { if (h) cublasLtMatmulDescDestroy(h); }
};
struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  ~Layout() { if (h) cublasLtMatrixLayoutDestroy(h); }
};
struct Preference {
  cublasLtMatmulPreference_t h = nullptr;
  ~Preference() { if (h) cublasLtMatmulPreferenceDestroy(h); }
};

template <typename T>
void set_desc(const MatmulDesc& d, cublasLtMatmulDescAttributes_t attr, const T& v,
              const char* op) {
  check_lt(cublasLtMatmulDescSetAttribute(d.h, attr, &v, sizeof(v)),
           "cublasLtMatmulDescSetAttribute", op);
}

// A column-major rows x cols matrix (leading dim ld) of `batch` matrices `stride` apart.
void make_layout(Layout& l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                 int64_t batch, int64_t stride, const char* op) {
  check_lt(cublasLtMatrixLayoutCreate(&l.h, type, uint64_t(rows), uint64_t(cols), ld),
           "cublasLtMatrixLayoutCreate", op);
  if (batch == 1) return;
  const int32_t count = int32_t(batch);
  check_lt(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                            sizeof(count)),
           "cublasLtMatrixLayoutSetAttribute", op);
  check_lt(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof(stride)),
           "cublasLtMatrixLayoutSetAttribute", op);
}

// Everything the heuristic's choice depends on.
using AlgoKey = std::array<int64_t, 21>;

// The heuristic's best algorithm for this problem, asked once per key.
cublasLtMatmulAlgo_t find_algo(const AlgoKey& key, cublasLtHandle_t handle,
                               const MatmulDesc& desc, const Layout& la, const Layout& lb,
                               const Layout& lc, const uint32_t (&align)[3], const char* op) {
  static std::mutex mu;
  static std::map<AlgoKey, cublasLtMatmulAlgo_t> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  Preference pref;
  check_lt(cublasLtMatmulPreferenceCreate(&pref.h), "cublasLtMatmulPreferenceCreate", op);
  const uint64_t workspace = kWorkspaceBytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace, sizeof(workspace)),
           "cublasLtMatmulPreferenceSetAttribute", op);
  // cuBLASLt's operand A is our B, its B our A; C and D are our C.
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t values[4] = {align[1], align[0], align[2], align[2]};
  for (int i = 0; i < 4; ++i)
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref.h, attrs[i], &values[i], sizeof(uint32_t)),
             "cublasLtMatmulPreferenceSetAttribute", op);
  cublasLtMatmulHeuristicResult_t result;
  std::memset(&result, 0, sizeof(result));
  int found = 0;
  check_lt(cublasLtMatmulAlgoGetHeuristic(handle, desc.h, la.h, lb.h, lc.h, lc.h, pref.h, 1,
                                          &result, &found),
           "cublasLtMatmulAlgoGetHeuristic", op);
  MERAK_CHECK(found > 0, op, ": cuBLASLt has no algorithm for this product (M=", key[5],
              ", N=", key[6], ", K=", key[7], ", batch ", key[11], ")");
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = result.algo;
  return result.algo;
}

// One cuBLASLt call: `batch` <= kMaxBatch matrices from the given pointers.
void gemm_call(const GemmArgs& g, const void* A, const void* B, void* C, int64_t batch,
               int device, cudaStream_t stream, const char* op) {
  DeviceLt& lt = device_lt(device, op);
  const bool tf32 = g.elem == Elem::F32 && tf32_enabled();
  const cudaDataType_t type = data_type(g.elem);
  const int64_t esize = g.elem == Elem::F32 ? 4 : 2;

  MatmulDesc desc;
  check_lt(cublasLtMatmulDescCreate(&desc.h, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                  : CUBLAS_COMPUTE_32F,
                                    CUDA_R_32F),
           "cublasLtMatmulDescCreate", op);
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, op_first, op);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, op_second, op);
  if (g.gelu_aux) {
    MERAK_CHECK(batch == 1, op, ": the GELU epilogue takes one matrix, not a batch of ", batch);
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
             g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, op);
    // The aux matrix is laid out as the result: column-major [N, M], leading dim ldc.
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.gelu_aux, op);
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(g.ldc), op);
  } else if (g.bias) {
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS, op);
  }
  if (g.bias) {
    // The bias runs along the column-major result's rows: our columns, N of them.
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, op);
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(type), op);
  }

  // Stored (before op) column-major shapes: our B is [N, K] (or [K, N] with trans_b), our A is
  // [K, M] (or [M, K] with trans_a), our C is [N, M].
  Layout la, lb, lc;
  make_layout(la, type, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb, batch, g.stride_b,
              op);
  make_layout(lb, type, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda, batch, g.stride_a,
              op);
  make_layout(lc, type, g.N, g.M, g.ldc, batch, g.stride_c, op);

  const bool batched = batch > 1;
  const uint32_t align[3] = {alignment(A, batched ? g.stride_a * esize : 0),
                             alignment(B, batched ? g.stride_b * esize : 0),
                             alignment(C, batched ? g.stride_c * esize : 0)};
  const AlgoKey key = {device,    int64_t(g.elem), tf32,       g.trans_a,  g.trans_b,
                       g.M,       g.N,             g.K,        g.lda,      g.ldb,
                       g.ldc,     batch,           g.stride_a, g.stride_b, g.stride_c,
                       g.bias != nullptr, g.accumulate, align[0], align[1], align[2],
                       g.gelu_aux != nullptr};
  const cublasLtMatmulAlgo_t algo = find_algo(key, lt.handle, desc, la, lb, lc, align, op);

  const float alpha = 1.f, beta = g.accumulate ? 1.f : 0.f;
  check_lt(cublasLtMatmul(lt.handle, desc.h, &alpha, B, la.h, A, lb.h, &beta, C, lc.h, C, lc.h,
                          &algo, lt.workspace, kWorkspaceBytes, stream),
           "cublasLtMatmul", op);
}

}  // namespace

void gemm(const GemmArgs& g, int device, cudaStream_t stream, const char* op) {
  const int64_t esize = g.elem == Elem::F32 ? 4 : 2;
  for (int64_t b0 = 0; b0 < g.batch; b0 += kMaxBatch) {
    const int64_t n = std::min(kMaxBatch, g.batch - b0);
    gemm_call(g, static_cast<const char*>(g.A) + b0 * g.stride_a * esize,
              static_cast<const char*>(g.B) + b0 * g.stride_b * esize,
              static_cast<char*>(g.C) + b0 * g.stride_c * esize, n, device, stream, op);
  }
}

}  // namespace merak::cuda_kernels::nn
