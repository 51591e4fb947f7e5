// The one threading runtime: OpenMP (oneDNN's GEMM uses the same libgomp pool, so kernels and
// GEMM never have two spinning pools fighting over two cores).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

namespace octet {

int num_threads();
void set_num_threads(int n);

namespace detail {
// The chunk the calling thread is running inside parallel_for (0 when it runs inline).
inline thread_local int t_chunk = 0;
struct ChunkScope {
  explicit ChunkScope(int chunk) : previous(t_chunk) { t_chunk = chunk; }
  ~ChunkScope() { t_chunk = previous; }
  int previous;
};
}  // namespace detail

// Index of the chunk the calling body runs, in [0, num_threads()): the slot for per-chunk partial
// results. Not omp_get_thread_num(), which inside someone else's parallel region (where
// parallel_for runs inline) can exceed num_threads().
inline int parallel_chunk() { return detail::t_chunk; }

// Calls f(lo, hi) on disjoint chunks covering [begin, end). The split depends only on the range
// and the thread count, so per-chunk partial results combine deterministically. Runs inline when
// the range is under `grain` or when already inside a parallel region. An exception thrown by f
// never leaves the OpenMP region (that would terminate the process): the first one is kept, every
// chunk finishes, and it is rethrown on the calling thread.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), max_chunks));
  if (threads <= 1 || omp_in_parallel()) {
    detail::ChunkScope chunk(0);
    f(begin, end);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t lo = begin + n * t / nt;
    const int64_t hi = begin + n * (t + 1) / nt;
    detail::ChunkScope chunk(static_cast<int>(t));
    try {
      if (lo < hi) f(lo, hi);
    } catch (...) {
#pragma omp critical(octet_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// Reductions: [begin, end) split into chunks that depend only on the range and `grain` (at least
// `grain` elements each, at most kReductionChunks of them), never on the thread count, and
// f(chunk, lo, hi) called once per chunk, on any thread. Partial results kept per chunk and
// combined in chunk order give the same bits on 1, 2 or 16 threads.
inline constexpr int64_t kReductionChunks = 64;
inline int64_t reduction_chunks(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  const int64_t g = std::max<int64_t>(grain, 1);
  return std::clamp<int64_t>((n + g - 1) / g, 1, kReductionChunks);
}
template <typename F>
void parallel_chunks(int64_t begin, int64_t end, int64_t grain, F&& f) {
  const int64_t n = end - begin;
  const int64_t chunks = reduction_chunks(n, grain);
  parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) f(c, begin + n * c / chunks, begin + n * (c + 1) / chunks);
  });
}

}  // namespace octet
