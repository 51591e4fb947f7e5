// octet's GEMM beside OpenBLAS (cblas_sgemm) and oneDNN (dnnl_sgemm called directly), in one
// run, interleaved, at the GEMMs of the `octet bench layer` step (d 768, 1024 tokens: fprop,
// dgrad and wgrad of qkv, proj, fc1 and fc2, with the transposes octet's Linear uses) and 768^3.
//
// Library settings that are read once per process (OPENBLAS_CORETYPE, ONEDNN_MAX_CPU_ISA) need
// a process each, so this program is a coordinator that starts one worker process per setting
// and hands them the measurements in turn: cell by cell (GEMM, thread count), round by round,
// every library once per round. Only one process computes at a time; between two blocks the
// coordinator pauses so that the threads of the block before (OpenBLAS's spin for ~0.1 s after a
// call, libgomp's for less) are asleep when the next one starts.
//
//   octet_gemm_peers [--rounds R] [--reps N] [--threads 1,2] [--quick]
#include <dnnl.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/sgemm.h"
#include "kernels/ops.h"
#include "runtime/named.h"
#include "runtime/parallel.h"
#include "runtime/rng.h"

#if OCTET_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

using octet::DType;
using octet::Tensor;
using octet::ops::Transpose;

// ---- the GEMMs ----

struct Gemm {
  std::string name;  // e.g. "qkv fprop"
  int64_t m, n, k;
  bool ta, tb;  // f32 operand layouts: A stored (K, M) when ta, B stored (N, K) when tb
};

// The GEMMs of one Linear (in -> out) over `tokens` rows, as modules/operand.cpp calls them in
// f32: fprop Y = X·Wᵀ, dgrad dX = dY·W, wgrad dW = dYᵀ·X. (Its FP8 GEMMs read every operand
// along K: A (M, K), B (N, K), whatever the pass.)
void add_linear(std::vector<Gemm>& out, const std::string& name, int64_t in, int64_t features,
                int64_t tokens) {
  out.push_back({name + " fprop", tokens, features, in, false, true});
  out.push_back({name + " dgrad", tokens, in, features, false, false});
  out.push_back({name + " wgrad", features, in, tokens, true, false});
}

std::vector<Gemm> gemms(bool quick) {
  std::vector<Gemm> g;
  if (quick) {
    g.push_back({"square", 128, 128, 128, false, false});
    add_linear(g, "fc1", 128, 512, 256);
    return g;
  }
  g.push_back({"square", 768, 768, 768, false, false});
  g.push_back({"square", 768, 768, 768, false, true});
  const int64_t d = 768, tokens = 4 * 256;  // `octet bench layer`: batch 4, seq 256
  add_linear(g, "qkv", d, 3 * d, tokens);
  add_linear(g, "proj", d, d, tokens);
  add_linear(g, "fc1", d, 4 * d, tokens);
  add_linear(g, "fc2", 4 * d, d, tokens);
  return g;
}

double flops(const Gemm& g) { return 2.0 * g.m * g.n * g.k; }

// ---- worker: the libraries in one process ----

// kOctetOwnF32 and kOctetOwnE4m3: ops::gemm on octet's own sgemm (kernels/cpu/sgemm.h, the
// default); kOctetF32, kOctetBf16 and kOctetE4m3: ops::gemm on the oneDNN tiles
// (OCTET_CPU_GEMM=onednn), the operands converted to f32 first.
enum class Lib {
  kOctetF32,
  kOctetOwnF32,
  kOctetBf16,
  kOctetE4m3,
  kOctetOwnE4m3,
  kOnednn,
  kOpenblas
};

constexpr octet::Named<Lib> kLibKeys[] = {{Lib::kOctetF32, "octet-f32"},
                                          {Lib::kOctetOwnF32, "octet-own-f32"},
                                          {Lib::kOctetOwnE4m3, "octet-own-e4m3"},
                                          {Lib::kOctetBf16, "octet-bf16"},
                                          {Lib::kOctetE4m3, "octet-e4m3"},
                                          {Lib::kOnednn, "onednn"},
                                          {Lib::kOpenblas, "openblas"}};
const char* lib_key(Lib l) { return octet::name_in(kLibKeys, l).data(); }

bool parse_lib(const std::string& s, Lib* out) {
  const Lib* lib = octet::find_named(kLibKeys, s);
  if (lib != nullptr) *out = *lib;
  return lib != nullptr;
}

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

// One GEMM's operands in every form the libraries take.
struct Operands {
  Tensor a, b;       // f32, stored as the f32 layout says
  Tensor a16, b16;   // bf16 copies
  Tensor a8, b8;     // e4m3, both read along K: A (M, K), B (N, K)
  Tensor c;          // (M, N) f32
  Tensor reference;  // the oneDNN tiles' f32 result, to check the others' layouts
};

Tensor quantize_e4m3(const Tensor& x) {
  Tensor q = Tensor::empty(x.shape(), DType::kE4M3);
  const Tensor scale = Tensor::from_floats({64.f}, {1});
  octet::ops::quantize_fp8(x, scale, &q, nullptr, nullptr);
  return q;
}

// While alive, ops::gemm runs on the given CPU GEMM library.
struct GemmLibrary {
  explicit GemmLibrary(octet::cpu::CpuGemmLibrary library)
      : before(octet::cpu::set_cpu_gemm_library(library)) {}
  ~GemmLibrary() { octet::cpu::set_cpu_gemm_library(before); }
  octet::cpu::CpuGemmLibrary before;
};
using octet::cpu::CpuGemmLibrary;

Operands make_operands(const Gemm& g, uint64_t seed) {
  octet::Generator gen(seed);
  auto random = [&](int64_t rows, int64_t cols) {
    Tensor t = Tensor::empty({rows, cols}, DType::kF32);
    gen.fill_normal(t, 0.f, 1.f);
    return t;
  };
  Operands o;
  o.a = g.ta ? random(g.k, g.m) : random(g.m, g.k);
  o.b = g.tb ? random(g.n, g.k) : random(g.k, g.n);
  o.a16 = octet::ops::cast(o.a, DType::kBF16);
  o.b16 = octet::ops::cast(o.b, DType::kBF16);
  // The FP8 operands in the K-major layout octet's FP8 GEMMs read (any values do for speed).
  o.a8 = quantize_e4m3(random(g.m, g.k));
  o.b8 = quantize_e4m3(random(g.n, g.k));
  o.c = Tensor::empty({g.m, g.n}, DType::kF32);
  o.reference = Tensor::empty({g.m, g.n}, DType::kF32);
  const GemmLibrary tiles(CpuGemmLibrary::kOnednn);  // the check's reference: the oneDNN tiles
  octet::ops::gemm(o.a, g.ta ? Transpose::kYes : Transpose::kNo, o.b,
                   g.tb ? Transpose::kYes : Transpose::kNo, o.reference);
  return o;
}

class Worker {
 public:
  explicit Worker(std::string config) : config_(std::move(config)) {}

  // "libs <key>...": what this process runs, and its libraries' own account of themselves.
  std::string hello() const {
    std::string libs = "libs";
    for (Lib l : libs_()) libs += std::string(" ") + lib_key(l);
    return libs;
  }
  std::string info() const {
    const dnnl_version_t* v = dnnl_version();
    std::string s = "onednn " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                    std::to_string(v->patch) + " isa " + isa_name(dnnl_get_effective_cpu_isa());
#if OCTET_HAVE_OPENBLAS
    s += std::string("; openblas core ") + openblas_get_corename() + ", config '" +
         openblas_get_config() + "'";
#endif
    return s;
  }

  // Times `reps` calls after one untimed call; "" and *error set when the library cannot run.
  std::vector<double> run(Lib lib, const Gemm& g, int threads, int reps, std::string* error) {
    Operands& o = operands(g);
    octet::set_num_threads(threads);
    omp_set_num_threads(threads);  // oneDNN's sgemm runs on OpenMP's pool
#if OCTET_HAVE_OPENBLAS
    openblas_set_num_threads(threads);
#endif
    std::function<void()> call;
    const Transpose ta = g.ta ? Transpose::kYes : Transpose::kNo;
    const Transpose tb = g.tb ? Transpose::kYes : Transpose::kNo;
    const int64_t lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n;
    static const Tensor inv = Tensor::from_floats({1.f / 64.f}, {1});
    switch (lib) {
      case Lib::kOctetF32:
        call = [&] {
          const GemmLibrary tiles(CpuGemmLibrary::kOnednn);
          octet::ops::gemm(o.a, ta, o.b, tb, o.c);
        };
        break;
      case Lib::kOctetOwnF32:
        call = [&] {
          const GemmLibrary own(CpuGemmLibrary::kOctet);
          octet::ops::gemm(o.a, ta, o.b, tb, o.c);
        };
        break;
      case Lib::kOctetOwnE4m3:
        call = [&] {
          const GemmLibrary own(CpuGemmLibrary::kOctet);
          octet::ops::GemmOptions options;
          options.a_scale_inv = &inv;
          options.b_scale_inv = &inv;
          octet::ops::gemm(o.a8, Transpose::kNo, o.b8, Transpose::kYes, o.c, options);
        };
        break;
      case Lib::kOctetBf16:
        call = [&] {
          const GemmLibrary tiles(CpuGemmLibrary::kOnednn);
          octet::ops::gemm(o.a16, ta, o.b16, tb, o.c);
        };
        break;
      case Lib::kOctetE4m3:
        call = [&] {
          const GemmLibrary tiles(CpuGemmLibrary::kOnednn);
          octet::ops::GemmOptions options;
          options.a_scale_inv = &inv;
          options.b_scale_inv = &inv;
          octet::ops::gemm(o.a8, Transpose::kNo, o.b8, Transpose::kYes, o.c, options);
        };
        break;
      case Lib::kOnednn:
        call = [&] {
          const dnnl_status_t s = dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.m, g.n, g.k, 1.f,
                                             o.a.data_as<float>(), lda, o.b.data_as<float>(), ldb,
                                             0.f, o.c.data_as<float>(), g.n);
          if (s != dnnl_success) std::abort();
        };
        break;
      case Lib::kOpenblas:
#if OCTET_HAVE_OPENBLAS
        call = [&] {
          cblas_sgemm(
              CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(g.m), static_cast<blasint>(g.n), static_cast<blasint>(g.k), 1.f,
              o.a.data_as<float>(), static_cast<blasint>(lda), o.b.data_as<float>(),
              static_cast<blasint>(ldb), 0.f, o.c.data_as<float>(), static_cast<blasint>(g.n));
        };
        break;
#else
        *error = "not built with OpenBLAS";
        return {};
#endif
    }
    call();
    if (lib == Lib::kOnednn || lib == Lib::kOpenblas || lib == Lib::kOctetOwnF32) {
      // Same operands, same layout: only the summation order may differ from the oneDNN tiles'.
      const float* got = o.c.data_as<float>();
      const float* want = o.reference.data_as<float>();
      double worst = 0;
      for (int64_t i = 0; i < g.m * g.n; ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
      }
      // Entries are sums of K products of N(0, 1) values: |c| ~ sqrt(K).
      if (worst > 1e-4 * std::sqrt(static_cast<double>(g.k)) * 10) {
        *error = "result differs from the oneDNN tiles' by " + std::to_string(worst);
        return {};
      }
    }
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      call();
      const auto t1 = std::chrono::steady_clock::now();
      times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return times;
  }

 private:
  std::vector<Lib> libs_() const {
    // "native": everything as detected; "openblas:<core>": OpenBLAS alone under a forced core
    // type (octet and oneDNN would measure the same as in "native"); "avx2": every library held
    // to AVX2.
    if (config_.rfind("openblas:", 0) == 0) return {Lib::kOpenblas};
    std::vector<Lib> l = {Lib::kOctetF32, Lib::kOctetOwnF32};
    if (config_ == "native") l.push_back(Lib::kOctetBf16);
    l.push_back(Lib::kOctetE4m3);
    l.push_back(Lib::kOctetOwnE4m3);
    l.push_back(Lib::kOnednn);
#if OCTET_HAVE_OPENBLAS
    l.push_back(Lib::kOpenblas);
#endif
    return l;
  }

  Operands& operands(const Gemm& g) {
    const std::string key = g.name + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                            std::to_string(g.k) + (g.ta ? "T" : "N") + (g.tb ? "T" : "N");
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      cache_.clear();  // the coordinator goes GEMM by GEMM: keep one set of operands
      it = cache_.emplace(key, make_operands(g, 7)).first;
    }
    return it->second;
  }

  std::string config_;
  std::map<std::string, Operands> cache_;
};

// Reads commands from `in`, answers on `out`, one line each:
//   "hello" -> "libs <key>...";  "info" -> a line;  "run <lib> <gemm> <threads> <reps>" ->
//   "ok <ms>..." or "na <reason>";  "quit".
int worker_main(const std::string& config, int in_fd, int out_fd, bool quick) {
  FILE* in = fdopen(in_fd, "r");
  FILE* out = fdopen(out_fd, "w");
  if (in == nullptr || out == nullptr) return 1;
  Worker worker(config);
  const std::vector<Gemm> all = gemms(quick);
  char line[512];
  while (std::fgets(line, sizeof line, in) != nullptr) {
    char cmd[32] = "", lib_text[32] = "";
    int gemm = 0, threads = 0, reps = 0;
    std::sscanf(line, "%31s", cmd);
    std::string reply;
    if (std::strcmp(cmd, "hello") == 0) {
      reply = worker.hello();
    } else if (std::strcmp(cmd, "info") == 0) {
      reply = worker.info();
    } else if (std::strcmp(cmd, "quit") == 0) {
      break;
    } else if (std::sscanf(line, "run %31s %d %d %d", lib_text, &gemm, &threads, &reps) == 4) {
      Lib lib;
      if (!parse_lib(lib_text, &lib) || gemm < 0 || gemm >= static_cast<int>(all.size())) {
        reply = "na bad command";
      } else {
        std::string error;
        const std::vector<double> times = worker.run(lib, all[gemm], threads, reps, &error);
        if (!error.empty()) {
          reply = "na " + error;
        } else {
          reply = "ok";
          for (double t : times) reply += " " + std::to_string(t);
        }
      }
    } else {
      reply = "na unknown command";
    }
    std::fprintf(out, "%s\n", reply.c_str());
    std::fflush(out);
  }
  return 0;
}

// ---- coordinator ----

struct Config {
  std::string name;                                      // passed to the worker
  std::string title;                                     // for the table
  std::vector<std::pair<std::string, std::string>> env;  // set ("" value: unset)
};

class Child {
 public:
  Child(const Config& c, bool quick) : config_(c) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      close(to_child[1]);
      close(from_child[0]);
      for (const auto& [key, value] : c.env) {
        if (value.empty()) {
          unsetenv(key.c_str());
        } else {
          setenv(key.c_str(), value.c_str(), 1);
        }
      }
      const std::string in = std::to_string(to_child[0]), out = std::to_string(from_child[1]);
      std::vector<const char*> args = {"octet_gemm_peers", "--worker", c.name.c_str(), in.c_str(),
                                       out.c_str()};
      if (quick) args.push_back("--quick");
      args.push_back(nullptr);
      execv("/proc/self/exe", const_cast<char* const*>(args.data()));
      std::perror("execv /proc/self/exe");
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = fdopen(to_child[1], "w");
    from_ = fdopen(from_child[0], "r");
  }
  ~Child() {
    std::fprintf(to_, "quit\n");
    std::fclose(to_);
    std::fclose(from_);
    waitpid(pid_, nullptr, 0);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  std::string ask(const std::string& command) {
    std::fprintf(to_, "%s\n", command.c_str());
    std::fflush(to_);
    std::string reply;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, from_) != nullptr) {
      reply += buf;
      if (!reply.empty() && reply.back() == '\n') break;
    }
    if (!reply.empty() && reply.back() == '\n') reply.pop_back();
    if (reply.empty()) {
      std::fprintf(stderr, "worker %s ended unexpectedly\n", config_.name.c_str());
      std::exit(1);
    }
    return reply;
  }
  const Config& config() const { return config_; }

 private:
  Config config_;
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

struct Column {
  Child* child;
  Lib lib;
  std::string title;
};

std::vector<int> parse_list(const char* text) {
  std::vector<int> v;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    const long x = std::strtol(p, &end, 10);
    if (end == p || x < 1) return {};
    v.push_back(static_cast<int>(x));
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') return {};
  }
  return v;
}

// Short enough for the table's columns: "OB" is OpenBLAS, "A2" the process held to AVX2.
std::string column_title(const Config& c, Lib lib, const std::string& openblas_core) {
  std::string t;
  switch (lib) {
    case Lib::kOctetF32:
      t = "tiles f32";
      break;
    case Lib::kOctetOwnF32:
      t = "octet f32";
      break;
    case Lib::kOctetOwnE4m3:
      t = "octet e4m3";
      break;
    case Lib::kOctetBf16:
      t = "tiles bf16";
      break;
    case Lib::kOctetE4m3:
      t = "tiles e4m3";
      break;
    case Lib::kOnednn:
      t = "oneDNN";
      break;
    case Lib::kOpenblas:
      t = "OB " + openblas_core;
      break;
  }
  return (c.name == "avx2" ? "A2 " : "") + t;
}

int coordinator_main(int rounds, int reps, const std::vector<int>& thread_counts, bool quick) {
  std::vector<Config> configs = {
      {"native", "as detected", {{"OPENBLAS_CORETYPE", ""}, {"ONEDNN_MAX_CPU_ISA", ""}}}};
  // Forcing OpenBLAS's SkylakeX kernels, or holding a process to AVX2, is only meaningful (and
  // only runs) on a processor with AVX-512; on an AVX2 machine the native process is the AVX2
  // measurement.
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
#else
  const bool avx512 = false;
#endif
  if (avx512) {
#if OCTET_HAVE_OPENBLAS
    configs.push_back({"openblas:SkylakeX",
                       "OpenBLAS forced to SkylakeX",
                       {{"OPENBLAS_CORETYPE", "SkylakeX"}, {"ONEDNN_MAX_CPU_ISA", ""}}});
#endif
    configs.push_back({"avx2",
                       "an AVX2 machine emulated",
                       {{"OPENBLAS_CORETYPE", "Haswell"}, {"ONEDNN_MAX_CPU_ISA", "AVX2"}}});
  }

  std::vector<std::unique_ptr<Child>> children;
  std::vector<Column> columns;
  std::printf(
      "octet_gemm_peers: %d rounds x %d timed calls per cell (after one untimed call), "
      "median reported, GFLOP/s;\nratio: octet f32 (own sgemm, the default) / the faster of oneDNN "
      "and OpenBLAS in the same setting (as detected, or AVX2); tiles: the same for the oneDNN "
      "tiles (OCTET_CPU_GEMM=onednn); OB: OpenBLAS and its core type, A2: the process held to "
      "AVX2\n",
      rounds, reps);
  if (!avx512) {
    std::printf(
        "this processor has no AVX-512: the native process is the AVX2 measurement "
        "(no OpenBLAS SkylakeX or held-to-AVX2 processes)\n");
  }
#if !OCTET_HAVE_OPENBLAS
  std::printf("OpenBLAS: not built in (apt-get install libopenblas-dev, then configure again)\n");
#endif
  for (const Config& c : configs) {
    children.push_back(std::make_unique<Child>(c, quick));
    Child& child = *children.back();
    const std::string info = child.ask("info");
    std::string env;
    for (const auto& [key, value] : c.env) {
      if (!value.empty()) env += " " + key + "=" + value;
    }
    std::printf("process %-18s (%s%s): %s\n", c.name.c_str(), c.title.c_str(), env.c_str(),
                info.c_str());
    std::string core;
    const size_t at = info.find("openblas core ");
    if (at != std::string::npos) {
      const size_t begin = at + std::strlen("openblas core ");
      core = info.substr(begin, info.find(',', begin) - begin);
    }
    const std::string libs = child.ask("hello");
    char buf[64];
    for (const char* p = libs.c_str() + 4; std::sscanf(p, " %63s", buf) == 1;) {
      Lib lib;
      if (parse_lib(buf, &lib)) columns.push_back({&child, lib, column_title(c, lib, core)});
      p = std::strstr(p, buf) + std::strlen(buf);
    }
  }

  const std::vector<Gemm> all = gemms(quick);
  for (int threads : thread_counts) {
    // times[gemm][column]
    std::vector<std::vector<std::vector<double>>> times(
        all.size(), std::vector<std::vector<double>>(columns.size()));
    std::vector<std::vector<std::string>> errors(all.size(),
                                                 std::vector<std::string>(columns.size()));
    for (size_t g = 0; g < all.size(); ++g) {
      for (int r = 0; r < rounds; ++r) {
        for (size_t c = 0; c < columns.size(); ++c) {
          if (!errors[g][c].empty()) continue;
          // Let the previous block's threads fall asleep (OpenBLAS spins about 0.1 s).
          std::this_thread::sleep_for(std::chrono::milliseconds(120));
          const std::string reply = columns[c].child->ask(
              "run " + std::string(lib_key(columns[c].lib)) + " " + std::to_string(g) + " " +
              std::to_string(threads) + " " + std::to_string(reps));
          if (reply.rfind("ok", 0) == 0) {
            const char* p = reply.c_str() + 2;
            char* end = nullptr;
            for (double t = std::strtod(p, &end); end != p; t = std::strtod(p, &end)) {
              times[g][c].push_back(t);
              p = end;
            }
          } else {
            errors[g][c] = reply.substr(std::min<size_t>(3, reply.size()));
          }
        }
      }
    }
    // The table: GFLOP/s of each column's median; octet f32 against the best f32 peer.
    std::printf("\nthreads %d\n%-12s %-16s", threads, "gemm", "M x N x K (f32)");
    for (const Column& c : columns) std::printf(" %13.13s", c.title.c_str());
    std::printf(" %10s %10s %10s %10s\n", "ratio", "tiles", "A2 ratio", "A2 tiles");
    // Ratios within one setting: octet f32 (own, then the oneDNN tiles) / the best f32 peer
    // (oneDNN, OpenBLAS).
    auto print_ratios = [&](const std::vector<double>& rate) {
      for (const char* setting : {"native", "avx2"}) {
        for (Lib mine : {Lib::kOctetOwnF32, Lib::kOctetF32}) {
          double octet = 0, best = 0;
          for (size_t c = 0; c < columns.size(); ++c) {
            const bool same =
                (columns[c].child->config().name == "avx2") == (std::strcmp(setting, "avx2") == 0);
            if (!same) continue;
            if (columns[c].lib == mine) octet = rate[c];
            if (columns[c].lib == Lib::kOnednn || columns[c].lib == Lib::kOpenblas) {
              best = std::max(best, rate[c]);
            }
          }
          if (octet > 0 && best > 0) {
            std::printf(" %9.3fx", octet / best);
          } else {
            std::printf(" %10s", "-");
          }
        }
      }
    };
    std::vector<double> layer_ms(columns.size(), 0.0);
    double layer_flops = 0;
    for (size_t g = 0; g < all.size(); ++g) {
      const Gemm& gm = all[g];
      char shape[48];
      std::snprintf(shape, sizeof shape, "%ldx%ldx%ld %s%s", static_cast<long>(gm.m),
                    static_cast<long>(gm.n), static_cast<long>(gm.k), gm.ta ? "T" : "N",
                    gm.tb ? "T" : "N");
      std::printf("%-12s %-16s", gm.name.c_str(), shape);
      const bool in_layer = gm.name != "square";
      if (in_layer) layer_flops += flops(gm);
      std::vector<double> rate(columns.size(), 0.0);
      for (size_t c = 0; c < columns.size(); ++c) {
        if (!errors[g][c].empty() || times[g][c].empty()) {
          std::printf(" %13s", "n/a");
          continue;
        }
        std::vector<double> t = times[g][c];
        std::sort(t.begin(), t.end());
        const double ms = t[t.size() / 2];
        rate[c] = flops(gm) / (ms * 1e6);
        if (in_layer) layer_ms[c] += ms;
        std::printf(" %13.1f", rate[c]);
      }
      print_ratios(rate);
      std::printf("\n");
    }
    std::printf("%-12s %-16s", "layer GEMMs", "(sum of ms)");
    std::vector<double> layer_rate(columns.size(), 0.0);
    for (size_t c = 0; c < columns.size(); ++c) {
      layer_rate[c] = layer_ms[c] > 0 ? layer_flops / (layer_ms[c] * 1e6) : 0.0;
      std::printf(" %13.1f", layer_rate[c]);
    }
    print_ratios(layer_rate);
    std::printf("\n%-12s %-16s", "", "ms per step");
    for (size_t c = 0; c < columns.size(); ++c) std::printf(" %13.1f", layer_ms[c]);
    std::printf("\n");
    for (size_t g = 0; g < all.size(); ++g) {
      for (size_t c = 0; c < columns.size(); ++c) {
        if (!errors[g][c].empty()) {
          std::printf("n/a: %s %s: %s\n", all[g].name.c_str(), columns[c].title.c_str(),
                      errors[g][c].c_str());
        }
      }
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 5 && std::strcmp(argv[1], "--worker") == 0) {
    const bool quick = argc >= 6 && std::strcmp(argv[5], "--quick") == 0;
    return worker_main(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), quick);
  }
  int rounds = 5, reps = 3;
  std::vector<int> threads = {1, 2};
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--rounds") == 0 && has_value) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--reps") == 0 && has_value) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--threads") == 0 && has_value) {
      threads = parse_list(argv[++i]);
      if (threads.empty()) {
        std::fprintf(stderr, "--threads expects a list such as 1,2\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr,
                   "usage: octet_gemm_peers [--rounds R] [--reps N] [--threads 1,2] [--quick]\n");
      return 2;
    }
  }
  return coordinator_main(rounds, reps, threads, quick);
}
