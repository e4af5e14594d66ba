// SPDX-License-Identifier: MIT
// cuBLAS and cuSOLVER are opened on their first call, not when `moewb` starts. Linked the usual way they are
// mapped and relocated by the dynamic loader before main(): about 190 MB resident (libcublasLt alone is a
// 540 MB file) for every command, `moewb --version` and `moewb inspect` included, which never touch the
// GPU. Here each function moewb calls is defined with the header's exact signature (a mismatch is a
// compile error: the headers declare them extern "C") and forwards to the library loaded with dlopen the
// first time any of them runs. The CUDA runtime itself stays linked: it is 3 MB and creates no context until
// a kernel or an allocation needs one.
//
// When the library cannot be opened, the functions return NOT_INITIALIZED, which the callers already report
// as a failed cuBLAS/cuSOLVER call, after one line on stderr naming the library and the loader's reason.
#include <cublas_v2.h>
#include <cusolverDn.h>
#include <dlfcn.h>

#include <cstdio>
#include <mutex>

namespace {

struct LazyLibrary {
  const char* soname;    // found through the executable's RUNPATH, LD_LIBRARY_PATH and ldconfig
  const char* fallback;  // the file the build linked against, for a run straight from the build tree
  std::once_flag opened;
  void* handle = nullptr;

  void* symbol(const char* name) {
    std::call_once(opened, [this] {
      handle = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
      if (!handle) handle = ::dlopen(fallback, RTLD_NOW | RTLD_LOCAL);
      if (!handle)
        std::fprintf(stderr, "moewb: cannot load %s (needed for GPU work): %s\n", soname, ::dlerror());
    });
    if (!handle) return nullptr;
    void* fn = ::dlsym(handle, name);
    if (!fn) std::fprintf(stderr, "moewb: %s has no function %s (a different CUDA version?)\n", soname, name);
    return fn;
  }
};

LazyLibrary cublas_library{MOEWB_CUBLAS_SONAME, MOEWB_CUBLAS_PATH, {}, nullptr};
LazyLibrary cusolver_library{MOEWB_CUSOLVER_SONAME, MOEWB_CUSOLVER_PATH, {}, nullptr};

}  // namespace

// Defines `name` forwarding to the library's function of the same name; `missing` is returned without it.
#define MOEWB_LAZY(library, missing, ret, name, params, args)                       \
  extern "C" ret name params {                                                      \
    static auto* const fn = reinterpret_cast<ret(*) params>(library.symbol(#name)); \
    if (!fn) return missing;                                                        \
    return fn args;                                                                 \
  }

#define MOEWB_CUBLAS(name, params, args) \
  MOEWB_LAZY(cublas_library, CUBLAS_STATUS_NOT_INITIALIZED, cublasStatus_t, name, params, args)
#define MOEWB_CUSOLVER(name, params, args) \
  MOEWB_LAZY(cusolver_library, CUSOLVER_STATUS_NOT_INITIALIZED, cusolverStatus_t, name, params, args)

MOEWB_CUBLAS(cublasCreate_v2, (cublasHandle_t * handle), (handle))
MOEWB_CUBLAS(cublasDestroy_v2, (cublasHandle_t handle), (handle))
MOEWB_CUBLAS(cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))
MOEWB_CUBLAS(cublasSetWorkspace_v2, (cublasHandle_t handle, void* workspace, size_t bytes),
             (handle, workspace, bytes))
MOEWB_CUBLAS(cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
MOEWB_LAZY(cublas_library, "cuBLAS library not loaded", const char*, cublasGetStatusName,
           (cublasStatus_t status), (status))
MOEWB_LAZY(cublas_library, "cuBLAS library not loaded", const char*, cublasGetStatusString,
           (cublasStatus_t status), (status))
MOEWB_CUBLAS(cublasGemmEx,
             (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
              const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
              cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
              cublasComputeType_t computeType, cublasGemmAlgo_t algo),
             (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
              computeType, algo))
MOEWB_CUBLAS(cublasGemmBatchedEx,
             (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
              const void* alpha, const void* const Aarray[], cudaDataType Atype, int lda,
              const void* const Barray[], cudaDataType Btype, int ldb, const void* beta, void* const Carray[],
              cudaDataType Ctype, int ldc, int batchCount, cublasComputeType_t computeType,
              cublasGemmAlgo_t algo),
             (handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype, ldb, beta, Carray,
              Ctype, ldc, batchCount, computeType, algo))
MOEWB_CUBLAS(cublasSgemmStridedBatched,
             (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
              const float* alpha, const float* A, int lda, long long int strideA, const float* B, int ldb,
              long long int strideB, const float* beta, float* C, int ldc, long long int strideC,
              int batchCount),
             (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
              batchCount))

MOEWB_CUSOLVER(cusolverDnCreate, (cusolverDnHandle_t * handle), (handle))
MOEWB_CUSOLVER(cusolverDnDestroy, (cusolverDnHandle_t handle), (handle))
MOEWB_CUSOLVER(cusolverDnSetStream, (cusolverDnHandle_t handle, cudaStream_t stream), (handle, stream))
MOEWB_CUSOLVER(cusolverDnSsyevd_bufferSize,
               (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n,
                const float* A, int lda, const float* W, int* lwork),
               (handle, jobz, uplo, n, A, lda, W, lwork))
MOEWB_CUSOLVER(cusolverDnSsyevd,
               (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n, float* A,
                int lda, float* W, float* work, int lwork, int* info),
               (handle, jobz, uplo, n, A, lda, W, work, lwork, info))
