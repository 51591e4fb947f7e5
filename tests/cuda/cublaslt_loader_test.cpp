// cuBLASLt is opened on its first use (kernels/cuda/cublaslt_loader.cpp), not linked: these need
// no GPU (version, status strings and matrix layouts are host calls), so they run wherever the
// toolkit is, and fail if a forwarding definition calls the wrong function or none. The
// emulation build defines the cublasLt* functions itself and has no loader. tests/CMakeLists.txt
// adds the other half: `octet --help` runs no cuBLASLt initializer.
#include <cublasLt.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace octet {
namespace {

#if !(defined(OCTET_CUDA_EMULATION) && OCTET_CUDA_EMULATION)

TEST(CublasLtLoader, ForwardsToTheToolkitsLibraryOnceCalled) {
  // The header's version: cuBLASLt reports major * 10000 + minor * 100 + patch.
  const size_t version = cublasLtGetVersion();
  EXPECT_EQ(version / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR)) << "version " << version;
  EXPECT_EQ(version, static_cast<size_t>(CUBLAS_VERSION));
  // Now the library is in the process (RTLD_NOLOAD opens only what is loaded already).
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* loaded = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(loaded, nullptr) << soname << " is not loaded after a call";
  if (loaded != nullptr) dlclose(loaded);

  // cuBLASLt's own words for two statuses (12.x and 13.x): the call reached the library.
  const char* unsupported = cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  const char* success = cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS);
  ASSERT_NE(unsupported, nullptr);
  ASSERT_NE(success, nullptr);
  EXPECT_NE(std::strstr(unsupported, "not supported"), nullptr) << unsupported;
  EXPECT_STREQ(success, "success");

  // A host-side descriptor made and destroyed through the forwarding definitions.
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 64, 32, 64), CUBLAS_STATUS_SUCCESS);
  ASSERT_NE(layout, nullptr);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t preference = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
  const size_t workspace = size_t{1} << 20;
  EXPECT_EQ(
      cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace, sizeof(workspace)),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(preference), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t transpose = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                           sizeof(transpose)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
}

#endif

}  // namespace
}  // namespace octet
