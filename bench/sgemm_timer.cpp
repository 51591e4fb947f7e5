// A profiling shim for bench/profile_layer.sh: LD_PRELOAD it into `octet bench` and every
// dnnl_sgemm call (octet's Linear GEMMs and the attention's per-head GEMMs alike) is timed on the
// calling thread and counted by its shape and transposes; at exit the totals go to the file
// named by OCTET_SGEMM_TIMER_OUT (stderr without it), one line per shape:
//   <transa><transb> <M> <N> <K> <calls> <total ms>
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

namespace {

using Sgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                      const float*, int64_t, float, float*, int64_t);

struct Totals {
  int64_t calls = 0;
  double ms = 0;
};

struct Table {
  std::mutex mutex;
  std::map<std::tuple<char, char, int64_t, int64_t, int64_t>, Totals> rows;

  ~Table() {
    const char* path = std::getenv("OCTET_SGEMM_TIMER_OUT");
    FILE* out = path != nullptr ? std::fopen(path, "w") : stderr;
    if (out == nullptr) return;
    for (const auto& [key, t] : rows) {
      const auto& [ta, tb, m, n, k] = key;
      std::fprintf(out, "%c%c %ld %ld %ld %ld %.3f\n", ta, tb, static_cast<long>(m),
                   static_cast<long>(n), static_cast<long>(k), static_cast<long>(t.calls), t.ms);
    }
    if (out != stderr) std::fclose(out);
  }
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

// Same signature as oneDNN's (dnnl_status_t is an int-sized enum; dnnl_dim_t is int64_t).
extern "C" int dnnl_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                          float* c, int64_t ldc) {
  static const Sgemm real = reinterpret_cast<Sgemm>(dlsym(RTLD_NEXT, "dnnl_sgemm"));
  if (real == nullptr) std::abort();
  Table& t = table();
  const auto t0 = std::chrono::steady_clock::now();
  const int status = real(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(t.mutex);
  Totals& row = t.rows[{transa, transb, m, n, k}];
  ++row.calls;
  row.ms += ms;
  return status;
}
