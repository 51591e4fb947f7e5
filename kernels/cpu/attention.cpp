// Causal multi-head self-attention on packed QKV (B, T, 3, H, D), forward and backward, on the
// CPU. Each (batch, head) works on strided slices of qkv in place: oneDNN sgemm for the score and
// value products (single-threaded inside the parallel region), vectorised row softmax between.
// Query rows go in blocks, and a block multiplies only the keys it can see (causal: half the work).
#include <dnnl.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

// Query rows per block: the block's score rows (kQueryBlock, T) stay in L2.
constexpr int64_t kQueryBlock = 64;

// Row-major C (m, n) = alpha * op(A) op(B) + beta * C.
void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const SerialLibraryScope serial;  // inside octet's tasks; one (batch, head) is one thread's work
  const dnnl_status_t status = dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  OCTET_CHECK(status == dnnl_success, "attention: dnnl_sgemm failed with status ",
              static_cast<int>(status), " for M=", m, " N=", n, " K=", k);
}

// ds = p * (dp - delta): the softmax backward of one score row (scaled later by `scale`).
OCTET_VECTOR_CLONES
void softmax_grad_row(const float* p, float delta, float* dp, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

// Pointers to one (batch, head)'s slices. Rows of q, k, v, dq, dk, dv are 3C apart; rows of out
// and dout are C apart.
struct Head {
  int64_t T, D, C;
  const float* q;  // (T, D), row stride 3C
  const float* k;
  const float* v;
};

Head head_of(const float* qkv, int64_t b, int64_t h, int64_t T, int64_t heads, int64_t D) {
  const int64_t C = heads * D;
  const float* base = qkv + b * T * 3 * C + h * D;
  return {T, D, C, base, base + C, base + 2 * C};
}

// s (rows, i1) = scale * q[i0:i1] k[0:i1]^T for the query block [i0, i1).
void scores(const Head& hd, int64_t i0, int64_t i1, float scale, float* s) {
  sgemm('N', 'T', i1 - i0, i1, hd.D, scale, hd.q + i0 * 3 * hd.C, 3 * hd.C, hd.k, 3 * hd.C, 0.f, s,
        i1);
}

}  // namespace

void CpuBackend::causal_attention(const Tensor& qkv, int64_t heads, float scale, Tensor& out,
                                  Tensor& lse) const {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  const float* pqkv = qkv.data_as<float>();  // (B, T, 3, H, D)
  float* pout = out.data_as<float>();        // (B, T, H, D)
  float* plse = lse.data_as<float>();        // (B, H, T)
  const int64_t blocks = (T + kQueryBlock - 1) / kQueryBlock;
  parallel_for(0, B * heads * blocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> s(static_cast<size_t>(kQueryBlock * T));  // (block rows, keys)
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / (heads * blocks), h = task / blocks % heads, qb = task % blocks;
      const Head hd = head_of(pqkv, b, h, T, heads, D);
      const int64_t i0 = qb * kQueryBlock, i1 = std::min(T, i0 + kQueryBlock), keys = i1;
      scores(hd, i0, i1, scale, s.data());
      for (int64_t i = i0; i < i1; ++i) {
        float* row = s.data() + (i - i0) * keys;
        const int64_t seen = i + 1;  // keys 0..i: the causal mask
        const float m = rowops::max(row, seen);
        const float sum = rowops::exp_store(row, m, row, seen);  // exps shifted by the row max
        plse[(b * heads + h) * T + i] = m + std::log(sum);
        rowops::scale(row, 1.f / sum, seen);
        std::fill(row + seen, row + keys, 0.f);
      }
      // out[i0:i1] (rows, D) = p (rows, keys) v[0:keys] (keys, D)
      sgemm('N', 'N', i1 - i0, D, keys, 1.f, s.data(), keys, hd.v, 3 * C, 0.f,
            pout + (b * T + i0) * C + h * D, C);
    }
  });
}

void CpuBackend::causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                           const Tensor& lse, int64_t heads, float scale,
                                           Tensor& dqkv) const {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  const float* pqkv = qkv.data_as<float>();    // (B, T, 3, H, D)
  const float* pdout = dout.data_as<float>();  // (B, T, H, D)
  const float* pout = out.data_as<float>();    // (B, T, H, D)
  const float* plse = lse.data_as<float>();    // (B, H, T)
  float* pd = dqkv.data_as<float>();           // (B, T, 3, H, D)
  const int64_t blocks = (T + kQueryBlock - 1) / kQueryBlock;
  // One task per (batch, head): dk and dv collect contributions from every query block.
  parallel_for(0, B * heads, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(kQueryBlock * T));   // (block rows, keys)
    std::vector<float> dp(static_cast<size_t>(kQueryBlock * T));  // (block rows, keys)
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / heads, h = task % heads;
      const Head hd = head_of(pqkv, b, h, T, heads, D);
      float* dq = pd + b * T * 3 * C + h * D;  // (T, D), row stride 3C, like q
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* dob = pdout + b * T * C + h * D;  // (T, D), row stride C
      const float* ob = pout + b * T * C + h * D;
      const float* lrow = plse + (b * heads + h) * T;
      // The last block sees every key, so going backwards its products initialise dk and dv
      // (beta = 0) and earlier blocks add to a prefix of them.
      for (int64_t qb = blocks - 1; qb >= 0; --qb) {
        const int64_t i0 = qb * kQueryBlock, i1 = std::min(T, i0 + kQueryBlock), keys = i1;
        const int64_t rows = i1 - i0;
        const float beta = qb == blocks - 1 ? 0.f : 1.f;
        // p = exp(scale q k^T - lse): the forward's probabilities, rebuilt from its saved lse.
        scores(hd, i0, i1, scale, p.data());
        for (int64_t i = i0; i < i1; ++i) {
          float* row = p.data() + (i - i0) * keys;
          rowops::exp_store(row, lrow[i], row, i + 1);
          std::fill(row + i + 1, row + keys, 0.f);
        }
        // dv[0:keys] (+)= p^T (keys, rows) do[i0:i1] (rows, D)
        sgemm('T', 'N', keys, D, rows, 1.f, p.data(), keys, dob + i0 * C, C, beta, dv, 3 * C);
        // dp (rows, keys) = do[i0:i1] v[0:keys]^T
        sgemm('N', 'T', rows, keys, D, 1.f, dob + i0 * C, C, hd.v, 3 * C, 0.f, dp.data(), keys);
        for (int64_t i = i0; i < i1; ++i) {
          // delta_i = sum_j p_ij dp_ij = do_i . o_i (cheaper: D terms instead of i + 1).
          const float delta = rowops::dot(dob + i * C, ob + i * C, D);
          softmax_grad_row(p.data() + (i - i0) * keys, delta, dp.data() + (i - i0) * keys, keys);
        }
        // dq[i0:i1] (rows, D) = scale * ds (rows, keys) k[0:keys] (keys, D)
        sgemm('N', 'N', rows, D, keys, scale, dp.data(), keys, hd.k, 3 * C, 0.f, dq + i0 * 3 * C,
              3 * C);
        // dk[0:keys] (+)= scale * ds^T (keys, rows) q[i0:i1] (rows, D)
        sgemm('T', 'N', keys, D, rows, scale, dp.data(), keys, hd.q + i0 * 3 * C, 3 * C, beta, dk,
              3 * C);
      }
    }
  });
}

// No fused grouped-query attention on the CPU: kernels/nn.h repeats the key/value heads for
// causal_attention.
bool CpuBackend::grouped_attention(const Tensor&, int64_t, int64_t, float, Tensor&, Tensor&) const {
  return false;
}
bool CpuBackend::grouped_attention_backward(const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, int64_t, int64_t, float, Tensor&) const {
  return false;
}

}  // namespace octet::cpu
