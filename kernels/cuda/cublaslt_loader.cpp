// cuBLASLt, loaded when first used: the cublasLt* functions the CUDA backend calls, each one
// forwarding to the library that the first call opens with dlopen. Linked directly, libcublasLt
// ran its static initializers in every process that links octet, with a GPU or without one,
// before main: in every `octet` command and in each of the ctest suite's test processes. The
// signatures are cublasLt.h's; a mismatch is a compile error, since the header declares every one
// of them.
#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

#include "runtime/error.h"

#ifndef OCTET_CUBLASLT_LIBRARY
#define OCTET_CUBLASLT_LIBRARY ""
#endif
#define OCTET_LT_STR2(x) #x
#define OCTET_LT_STR(x) OCTET_LT_STR2(x)

namespace octet::cuda {
namespace {

// The library the build found (CMake's CUDA::cublasLt), else the one the loader finds by its
// soname. A failure throws once per call that needs it, naming what was tried.
void* cublaslt_library() {
  static void* const handle = [] {
    std::string tried;
    for (const char* name :
         {OCTET_CUBLASLT_LIBRARY, "libcublasLt.so." OCTET_LT_STR(CUBLAS_VER_MAJOR)}) {
      if (name[0] == '\0') continue;
      if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
      const char* why = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (why != nullptr ? why : name);
    }
    OCTET_FAIL("cuBLASLt could not be loaded: ", tried);
  }();
  return handle;
}

template <typename Fn>
Fn resolve(const char* name) {
  void* symbol = dlsym(cublaslt_library(), name);
  OCTET_CHECK(symbol != nullptr, "cuBLASLt has no function ", name);
  return reinterpret_cast<Fn>(symbol);
}

}  // namespace
}  // namespace octet::cuda

// Each definition resolves its function once (a thread-safe static) and calls it.
#define OCTET_LT_CALL(name, ...)                                                      \
  static const auto fn = octet::cuda::resolve<decltype(&::name)>(OCTET_LT_STR(name)); \
  return fn(__VA_ARGS__)
// The destroy calls run in destructors, which must not throw: a failure to resolve is a status.
#define OCTET_LT_DESTROY(name, object)    \
  try {                                   \
    OCTET_LT_CALL(name, object);          \
  } catch (...) {                         \
    return CUBLAS_STATUS_NOT_INITIALIZED; \
  }

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  OCTET_LT_CALL(cublasLtCreate, handle);
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  OCTET_LT_CALL(cublasLtGetStatusString, status);
}

size_t CUBLASWINAPI cublasLtGetVersion(void) { OCTET_LT_CALL(cublasLtGetVersion); }

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* a,
                                           cublasLtMatrixLayout_t a_desc, const void* b,
                                           cublasLtMatrixLayout_t b_desc, const void* beta,
                                           const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                                           cublasLtMatrixLayout_t d_desc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream) {
  OCTET_LT_CALL(cublasLtMatmul, handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d,
                d_desc, algo, workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
    cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  OCTET_LT_CALL(cublasLtMatmulAlgoGetHeuristic, handle, desc, a_desc, b_desc, c_desc, d_desc,
                preference, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  OCTET_LT_CALL(cublasLtMatmulDescCreate, desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  OCTET_LT_DESTROY(cublasLtMatmulDescDestroy, desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  OCTET_LT_CALL(cublasLtMatmulDescSetAttribute, desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  OCTET_LT_CALL(cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  OCTET_LT_DESTROY(cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  OCTET_LT_CALL(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  OCTET_LT_CALL(cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  OCTET_LT_DESTROY(cublasLtMatrixLayoutDestroy, layout);
}
