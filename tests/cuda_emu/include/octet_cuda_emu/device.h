// CUDA emulation build: the device side of CUDA on the CPU. A kernel launch runs the grid's blocks
// one after another on the calling thread; the threads of a block are cooperative fibers that
// switch only at __syncthreads and at warp intrinsics (tests/cuda_emu/exec.cpp), so shared
// memory is one block's at a time and atomics need no locks. Built-in variables read the running
// fiber's state; everything else is plain C++ with CUDA's names and semantics.
#pragma once

#include <cuda_runtime_api.h>
#include <math.h>  // CUDA's float functions (expf, fmaxf, isnan, ...) in the global namespace

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// Static shared memory: one object per kernel (function-local static), which is exactly one
// block's shared memory because blocks run one at a time. octet_cuda_translate follows each such
// declaration with octet::emu::static_shared, which poisons it at the start of every block.
#define __shared__ static

namespace octet::emu {

namespace detail {

// The running fiber's coordinates; `block` is null outside a kernel.
struct ExecState {
  uint3 thread_idx;
  uint3 block_idx;
  uint3 block_dim;
  uint3 grid_dim;
  void* block;
  int tid;  // linear thread index in the block
};
extern __thread ExecState g_exec;

enum class WarpOp : uint8_t {
  kShflIdx,
  kShflUp,
  kShflDown,
  kShflXor,
  kBallot,
  kAny,
  kAll,
  kSyncwarp,
};

void syncthreads(const char* file, int line);
int syncthreads_reduce(int predicate, int op, const char* file, int line);  // op 0 count 1 and 2 or
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file,
                 int line);
unsigned active_mask();
void* dynamic_shared();
void static_shared(void* p, size_t bytes, unsigned long long* generation);

struct LaunchConfig {
  const void* id;    // the kernel's address (cudaFuncSetAttribute's key), or null
  const char* name;  // as written at the launch
  const char* file;  // where the launch is
  int line;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
};
struct PointerArg {
  int index;
  const void* ptr;
};
// Checks the configuration and the pointer arguments, then runs the grid (body(ctx) once per
// thread). A bad configuration sets the thread's last error, as the real runtime does.
void launch(const LaunchConfig& config, const PointerArg* pointers, int count, void (*body)(void*),
            void* ctx);
// Whether `stream` captures (graph.cpp); a launch on it is then recorded by capture_launch, its
// arguments kept in `body`, and runs (checks included) at each replay of the graph.
bool capturing(cudaStream_t stream);
void capture_launch(const LaunchConfig& config, std::vector<PointerArg> pointers,
                    std::function<void()> body);

template <typename T>
void collect_pointer(PointerArg* out, int& count, int index, const T& arg) {
  if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>) {
    out[count++] = {index, static_cast<const void*>(arg)};
  }
}

template <typename F>
void invoke(void* f) {
  (*static_cast<F*>(f))();
}

template <typename T>
uint64_t to_bits(const T& v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "warp intrinsics take values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

template <typename T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace detail

// `kernel<<<grid, block, smem, stream>>>(args...)` after octet_cuda_translate. The arguments are
// evaluated and copied once, as CUDA copies kernel parameters; each thread calls the kernel with
// its own copy.
template <typename Body, typename... A>
void launch(const void* id, const char* name, const char* file, int line, dim3 grid, dim3 block,
            size_t smem, cudaStream_t stream, Body body, A&&... args) {
  std::tuple<std::decay_t<A>...> params(std::forward<A>(args)...);
  detail::PointerArg pointers[sizeof...(A) + 1];
  int count = 0;
  std::apply(
      [&](const auto&... p) {
        int index = 0;
        (detail::collect_pointer(pointers, count, index++, p), ...);
      },
      params);
  const detail::LaunchConfig config{id, name, file, line, grid, block, smem, stream};
  if (detail::capturing(stream)) {
    auto owned = std::make_shared<std::tuple<std::decay_t<A>...>>(std::move(params));
    detail::capture_launch(config, {pointers, pointers + count},
                           [owned, body]() { std::apply(body, *owned); });
    return;
  }
  auto run = [&]() { std::apply(body, params); };
  detail::launch(config, pointers, count, &detail::invoke<decltype(run)>, &run);
}

// `extern __shared__ T name[];` after octet_cuda_translate: the block's dynamic shared memory,
// poisoned at the start of every block.
template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(detail::dynamic_shared());
}

// After each `__shared__` declaration in a function: poisons the object once per block.
template <typename T>
void static_shared(T* object, size_t bytes, unsigned long long* generation) {
  detail::static_shared(static_cast<void*>(object), bytes, generation);
}

}  // namespace octet::emu

// ---- built-in variables ----
#define threadIdx (static_cast<const uint3&>(::octet::emu::detail::g_exec.thread_idx))
#define blockIdx (static_cast<const uint3&>(::octet::emu::detail::g_exec.block_idx))
#define blockDim (static_cast<const uint3&>(::octet::emu::detail::g_exec.block_dim))
#define gridDim (static_cast<const uint3&>(::octet::emu::detail::g_exec.grid_dim))
constexpr int warpSize = 32;

// ---- barriers and warp intrinsics (file and line name the call in diagnostics) ----
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::octet::emu::detail::syncthreads(file, line);
}
inline int __syncthreads_count(int p, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
  return ::octet::emu::detail::syncthreads_reduce(p, 0, file, line);
}
inline int __syncthreads_and(int p, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  return ::octet::emu::detail::syncthreads_reduce(p, 1, file, line);
}
inline int __syncthreads_or(int p, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
  return ::octet::emu::detail::syncthreads_reduce(p, 2, file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  ::octet::emu::detail::warp_op(::octet::emu::detail::WarpOp::kSyncwarp, mask, 0, 0, warpSize, file,
                                line);
}
inline unsigned __activemask() { return ::octet::emu::detail::active_mask(); }

#define OCTET_EMU_SHFL(NAME, OP)                                                              \
  template <typename T>                                                                       \
  inline T NAME(unsigned mask, T var, int arg, int width = warpSize,                          \
                const char* file = __builtin_FILE(), int line = __builtin_LINE()) {           \
    using ::octet::emu::detail::from_bits;                                                    \
    using ::octet::emu::detail::to_bits;                                                      \
    return from_bits<T>(::octet::emu::detail::warp_op(::octet::emu::detail::WarpOp::OP, mask, \
                                                      to_bits(var), arg, width, file, line)); \
  }
OCTET_EMU_SHFL(__shfl_sync, kShflIdx)
OCTET_EMU_SHFL(__shfl_up_sync, kShflUp)
OCTET_EMU_SHFL(__shfl_down_sync, kShflDown)
OCTET_EMU_SHFL(__shfl_xor_sync, kShflXor)
#undef OCTET_EMU_SHFL

inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return static_cast<unsigned>(::octet::emu::detail::warp_op(
      ::octet::emu::detail::WarpOp::kBallot, mask, predicate != 0, 0, warpSize, file, line));
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return static_cast<int>(::octet::emu::detail::warp_op(::octet::emu::detail::WarpOp::kAny, mask,
                                                        predicate != 0, 0, warpSize, file, line));
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return static_cast<int>(::octet::emu::detail::warp_op(::octet::emu::detail::WarpOp::kAll, mask,
                                                        predicate != 0, 0, warpSize, file, line));
}

// One OS thread runs every fiber and a fiber never switches inside these: memory order is
// program order.
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}

// ---- atomics (return the old value, as in CUDA) ----
#define OCTET_EMU_ATOMIC(NAME, T, EXPR) \
  inline T NAME(T* address, T val) {    \
    const T old = *address;             \
    *address = (EXPR);                  \
    return old;                         \
  }
OCTET_EMU_ATOMIC(atomicAdd, int, old + val)
OCTET_EMU_ATOMIC(atomicAdd, unsigned int, old + val)
OCTET_EMU_ATOMIC(atomicAdd, unsigned long long int, old + val)
OCTET_EMU_ATOMIC(atomicAdd, float, old + val)
OCTET_EMU_ATOMIC(atomicAdd, double, old + val)
OCTET_EMU_ATOMIC(atomicSub, int, old - val)
OCTET_EMU_ATOMIC(atomicSub, unsigned int, old - val)
OCTET_EMU_ATOMIC(atomicExch, int, val)
OCTET_EMU_ATOMIC(atomicExch, unsigned int, val)
OCTET_EMU_ATOMIC(atomicExch, unsigned long long int, val)
OCTET_EMU_ATOMIC(atomicExch, float, val)
OCTET_EMU_ATOMIC(atomicMax, int, old > val ? old : val)
OCTET_EMU_ATOMIC(atomicMax, unsigned int, old > val ? old : val)
OCTET_EMU_ATOMIC(atomicMax, long long int, old > val ? old : val)
OCTET_EMU_ATOMIC(atomicMax, unsigned long long int, old > val ? old : val)
OCTET_EMU_ATOMIC(atomicMin, int, old < val ? old : val)
OCTET_EMU_ATOMIC(atomicMin, unsigned int, old < val ? old : val)
OCTET_EMU_ATOMIC(atomicMin, long long int, old < val ? old : val)
OCTET_EMU_ATOMIC(atomicMin, unsigned long long int, old < val ? old : val)
OCTET_EMU_ATOMIC(atomicAnd, int, old& val)
OCTET_EMU_ATOMIC(atomicAnd, unsigned int, old& val)
OCTET_EMU_ATOMIC(atomicAnd, unsigned long long int, old& val)
OCTET_EMU_ATOMIC(atomicOr, int, old | val)
OCTET_EMU_ATOMIC(atomicOr, unsigned int, old | val)
OCTET_EMU_ATOMIC(atomicOr, unsigned long long int, old | val)
OCTET_EMU_ATOMIC(atomicXor, int, old ^ val)
OCTET_EMU_ATOMIC(atomicXor, unsigned int, old ^ val)
OCTET_EMU_ATOMIC(atomicXor, unsigned long long int, old ^ val)
OCTET_EMU_ATOMIC(atomicInc, unsigned int, old >= val ? 0u : old + 1u)
OCTET_EMU_ATOMIC(atomicDec, unsigned int, (old == 0u || old > val) ? val : old - 1u)
#undef OCTET_EMU_ATOMIC

#define OCTET_EMU_CAS(T)                             \
  inline T atomicCAS(T* address, T compare, T val) { \
    const T old = *address;                          \
    if (old == compare) *address = val;              \
    return old;                                      \
  }
OCTET_EMU_CAS(int)
OCTET_EMU_CAS(unsigned int)
OCTET_EMU_CAS(unsigned long long int)
OCTET_EMU_CAS(unsigned short int)
#undef OCTET_EMU_CAS

// ---- bit reinterpretation, integer intrinsics ----
inline unsigned int __float_as_uint(float x) {
  return ::octet::emu::detail::from_bits<unsigned>(::octet::emu::detail::to_bits(x));
}
inline float __uint_as_float(unsigned int x) { return ::octet::emu::detail::from_bits<float>(x); }
inline int __float_as_int(float x) {
  return ::octet::emu::detail::from_bits<int>(::octet::emu::detail::to_bits(x));
}
inline float __int_as_float(int x) {
  return ::octet::emu::detail::from_bits<float>(::octet::emu::detail::to_bits(x));
}
inline long long int __double_as_longlong(double x) {
  return ::octet::emu::detail::from_bits<long long>(::octet::emu::detail::to_bits(x));
}
inline double __longlong_as_double(long long int x) {
  return ::octet::emu::detail::from_bits<double>(::octet::emu::detail::to_bits(x));
}
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long int x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long int x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long int x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline int __mulhi(int a, int b) { return static_cast<int>((static_cast<long long>(a) * b) >> 32); }

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

// ---- floating point: IEEE round-to-nearest operations; the kernels target compiles with
// -ffp-contract=off, so a * b + c is two roundings, as nvcc's _rn intrinsics promise. The fast
// approximations (__expf, rsqrtf, ...) are the exact functions here: results can differ from a
// GPU by the approximation's few ulps, which the parity tolerances already allow. ----
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __frsqrt_rn(float a) { return 1.f / sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float rsqrtf(float a) { return 1.f / sqrtf(a); }
inline double rsqrt(double a) { return 1.0 / sqrt(a); }
inline float __expf(float a) { return expf(a); }
inline float __exp10f(float a) { return powf(10.f, a); }
inline float __logf(float a) { return logf(a); }
inline float __log2f(float a) { return log2f(a); }
inline float __log10f(float a) { return log10f(a); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __sinf(float a) { return sinf(a); }
inline float __cosf(float a) { return cosf(a); }
inline float __tanf(float a) { return tanf(a); }
inline float __saturatef(float a) { return a > 0.f ? (a < 1.f ? a : 1.f) : 0.f; }  // NaN -> 0
inline int __float2int_rn(float a) { return static_cast<int>(nearbyintf(a)); }
inline int __float2int_rz(float a) { return static_cast<int>(a); }
inline unsigned int __float2uint_rn(float a) { return static_cast<unsigned>(nearbyintf(a)); }
inline float __int2float_rn(int a) { return static_cast<float>(a); }

// ---- CUDA's global min/max overloads (math_functions.hpp), so mixed calls resolve as with nvcc
// ----
#define OCTET_EMU_MINMAX(R, A, B)                                                         \
  inline R min(A a, B b) {                                                                \
    return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); \
  }                                                                                       \
  inline R max(A a, B b) {                                                                \
    return static_cast<R>(a) > static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); \
  }
OCTET_EMU_MINMAX(int, int, int)
OCTET_EMU_MINMAX(unsigned int, unsigned int, unsigned int)
OCTET_EMU_MINMAX(unsigned int, int, unsigned int)
OCTET_EMU_MINMAX(unsigned int, unsigned int, int)
OCTET_EMU_MINMAX(long int, long int, long int)
OCTET_EMU_MINMAX(unsigned long int, unsigned long int, unsigned long int)
OCTET_EMU_MINMAX(unsigned long int, long int, unsigned long int)
OCTET_EMU_MINMAX(unsigned long int, unsigned long int, long int)
OCTET_EMU_MINMAX(long long int, long long int, long long int)
OCTET_EMU_MINMAX(unsigned long long int, unsigned long long int, unsigned long long int)
OCTET_EMU_MINMAX(unsigned long long int, long long int, unsigned long long int)
OCTET_EMU_MINMAX(unsigned long long int, unsigned long long int, long long int)
#undef OCTET_EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }
