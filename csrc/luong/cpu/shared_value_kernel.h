// Shared-value attention on the CPU (SPEC section 2): each head scores its own keys, every head reads the same values,
// so the value set is never copied per head. Built for a handful of query rows per (sentence, head) — one per decoder
// step — with at::vec dot products and row updates. Included by shared_value_kernel_<isa>.cpp.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <vector>

#include "common/key_lengths.h"
#include "common/online_softmax.h"
#include "luong/cpu/kernel_api.h"

namespace mma_nmt::luong::cpu::MMA_NMT_CPU_ISA {
namespace {

using at::vec::Vectorized;

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  Vec acc0(T(0)), acc1(T(0));
  int64_t c = 0;
  for (; c + 2 * V <= n; c += 2 * V) {
    acc0 = at::vec::fmadd(Vec::loadu(a + c), Vec::loadu(b + c), acc0);
    acc1 = at::vec::fmadd(Vec::loadu(a + c + V), Vec::loadu(b + c + V), acc1);
  }
  for (; c < n; c += V) {
    const int64_t count = std::min<int64_t>(V, n - c);
    acc0 = at::vec::fmadd(Vec::loadu(a + c, count), Vec::loadu(b + c, count), acc0);
  }
  acc0 = acc0 + acc1;
  return at::vec::vec_reduce_all<T>([](Vec& x, Vec& y) { return x + y; }, acc0);
}

// y[0:n] += alpha * x[0:n]
template <typename T>
void axpy(T alpha, const T* x, T* y, int64_t n) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  const Vec a(alpha);
  for (int64_t c = 0; c < n; c += V) {
    const int64_t count = std::min<int64_t>(V, n - c);
    at::vec::fmadd(a, Vec::loadu(x + c, count), Vec::loadu(y + c, count)).store(y + c, count);
  }
}

// One query row: out (Dv) and lse from q_row (D) against keys (S, D) and the shared values (S, Dv).
template <typename T>
void forward_row(const SharedValueParams& p, int64_t n_keys, const T* q_row, const T* k, const T* v, T* scores,
                 T* out, T* lse, T* probs) {
  const int64_t D = p.head_dim, Dv = p.value_dim;
  OnlineSoftmax<T> state;
  T row_max = negative_infinity<T>();
  for (int64_t s = 0; s < n_keys; ++s) {
    scores[s] = T(p.scale) * dot(q_row, k + s * D, D);
    row_max = std::max(row_max, scores[s]);
  }
  std::fill(out, out + Dv, T(0));
  if (n_keys > 0) state.raise_max(row_max);
  for (int64_t s = 0; s < n_keys; ++s) {
    const T w = state.weight(scores[s]);
    state.add(w);
    axpy(w, v + s * Dv, out, Dv);
  }
  const T inv = state.inverse_sum();
  for (int64_t c = 0; c < Dv; ++c) out[c] *= inv;
  *lse = state.log_sum_exp();
  if (probs != nullptr) {
    // exp(logit - max) / sum as torch.softmax does: exp(logit - lse) would carry lse's rounding, |lse| * eps relative,
    // into every weight (3e-5 for logits ~600 in float32).
    for (int64_t s = 0; s < n_keys; ++s) probs[s] = state.weight(scores[s]) * inv;
  }
}

template <typename T>
void forward_typed(const SharedValueParams& p, SharedValueForward& t) {
  const int64_t H = p.heads, T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const T *q = t.q.data_ptr<T>(), *k = t.k.data_ptr<T>(), *v = t.v.data_ptr<T>();
  T *out = t.out.data_ptr<T>(), *lse = t.lse.data_ptr<T>();
  T* probs = t.probs.defined() ? t.probs.data_ptr<T>() : nullptr;
  // Tasks are (sentence, head) pairs in order, so a thread reads one sentence's values for all its heads while cached.
  at::parallel_for(0, p.batch * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> scores(std::max<int64_t>(S, 1));
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / H, n_keys = keys_of_sentence(lengths, b, S);
      for (int64_t i = 0; i < T_len; ++i) {
        const int64_t row = bh * T_len + i;
        forward_row<T>(p, n_keys, q + row * D, k + bh * S * D, v + b * S * Dv, scores.data(), out + row * Dv,
                       lse + row, probs ? probs + row * S : nullptr);
      }
    }
  });
}

// Backward of one query row; adds into this sentence's grad_k (its head) and grad_v (shared), writes grad_q.
template <typename T>
void backward_row(const SharedValueParams& p, int64_t n_keys, const T* dout, const T* q_row, const T* k, const T* v,
                  const T* out, T lse, T* dq, T* dk, T* dv) {
  const int64_t D = p.head_dim, Dv = p.value_dim;
  const T scale = T(p.scale);
  if (lse == negative_infinity<T>()) return;  // fully masked row: every gradient is 0
  const T delta = dot(dout, out, Dv);          // sum_s P_s dP_s
  for (int64_t s = 0; s < n_keys; ++s) {
    const T prob = probability_from_lse(scale * dot(q_row, k + s * D, D), lse);
    const T grad_logit = prob * (dot(dout, v + s * Dv, Dv) - delta) * scale;
    axpy(grad_logit, k + s * D, dq, D);
    axpy(grad_logit, q_row, dk + s * D, D);
    axpy(prob, dout, dv + s * Dv, Dv);
  }
}

template <typename T>
void backward_typed(const SharedValueParams& p, SharedValueBackward& t) {
  const int64_t H = p.heads, T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const T *dout = t.grad_out.data_ptr<T>(), *q = t.q.data_ptr<T>(), *k = t.k.data_ptr<T>(), *v = t.v.data_ptr<T>();
  const T *out = t.out.data_ptr<T>(), *lse = t.lse.data_ptr<T>();
  T *dq = t.grad_q.data_ptr<T>(), *dk = t.grad_k.data_ptr<T>(), *dv = t.grad_v.data_ptr<T>();
  // One task per sentence: it owns grad_v[b], which every head of the sentence adds to, and zeroes its own slices of
  // grad_k and grad_v (the caller allocates them uninitialised) while they are about to be used anyway.
  at::parallel_for(0, p.batch, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n_keys = keys_of_sentence(lengths, b, S);
      std::fill(dv + b * S * Dv, dv + (b + 1) * S * Dv, T(0));
      for (int64_t h = 0; h < H; ++h) {
        const int64_t bh = b * H + h;
        std::fill(dk + bh * S * D, dk + (bh + 1) * S * D, T(0));
        for (int64_t i = 0; i < T_len; ++i) {
          const int64_t row = bh * T_len + i;
          backward_row<T>(p, n_keys, dout + row * Dv, q + row * D, k + bh * S * D, v + b * S * Dv, out + row * Dv,
                          lse[row], dq + row * D, dk + bh * S * D, dv + b * S * Dv);
        }
      }
    }
  });
}

}  // namespace

void shared_value_forward(const SharedValueParams& p, SharedValueForward& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q.scalar_type(), "mma_nmt::shared_value_attention cpu forward",
                             [&] { forward_typed<scalar_t>(p, t); });
}

void shared_value_backward(const SharedValueParams& p, SharedValueBackward& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q.scalar_type(), "mma_nmt::shared_value_attention cpu backward",
                             [&] { backward_typed<scalar_t>(p, t); });
}

}  // namespace mma_nmt::luong::cpu::MMA_NMT_CPU_ISA
