// CUDA emulation build (tests/cuda_emu): the runtime API plus the device side of CUDA (built-in
// variables, intrinsics, atomics, kernel launches) emulated on the CPU. A .cu file reaches this
// through octet_cuda_translate, which turns its <<<...>>> launches into octet::emu::launch calls.
#pragma once

#include <cuda_runtime_api.h>

#include "octet_cuda_emu/device.h"

template <typename T>
inline cudaError_t cudaMalloc(T** ptr, size_t size) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), size);
}

template <typename T>
inline cudaError_t cudaFuncSetAttribute(T* entry, enum cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}
