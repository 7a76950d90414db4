// Fused GMM cross-attention on the CPU (SPEC section 5): one pass over a sentence's real keys, in tiles, accumulates both
// the online-softmax dot-product context (alpha v) and the Gaussian-mixture context (beta v); no (T, S) tensor is built.
// Included by gmm_kernel_<isa>.cpp after it has chosen the instruction set (CPU_CAPABILITY), so every build of these
// templates lives in its own namespace.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <vector>

#include "common/key_lengths.h"
#include "common/online_softmax.h"
#include "gmm/cpu/kernel_api.h"
#include "gmm/gmm_math.h"

namespace mma_nmt::gmm::cpu::MMA_NMT_CPU_ISA {
namespace {

#include "gmm/cpu/tile_math.h"


constexpr int64_t kQueryBlock = 16;  // query rows that share one pass over a key tile
constexpr int64_t kKeyTile = 128;    // keys scored at once

#include "gmm/cpu/gmm_rows.h"

// Points `rows` at row 0 of head bh = (sentence, head) of x, a (B, H, len, dim) tensor whose rows are contiguous, and
// `row_stride` at the distance between its rows.
template <typename T, typename P>
void point_at_rows(const at::Tensor& x, int64_t heads, int64_t bh, P& rows, int64_t& row_stride) {
  rows = x.data_ptr<T>() + (bh / heads) * x.stride(0) + (bh % heads) * x.stride(1);
  row_stride = x.stride(2);
}

// Pointers of one (sentence, head) slice of the forward tensors. q, k, v and out are read and written through their
// row strides (head views of projections, a position-major out); the others are contiguous.
template <typename T>
struct ForwardHead {
  const T *q, *k, *v, *omega, *mu, *sigma, *gate, *center, *width;
  T *out, *lse, *log_mass, *ctx_a, *ctx_b, *alpha, *beta;
  int64_t q_stride, k_stride, v_stride, out_stride;  // row strides
};

// Start of an optional tensor's slice, or null when the tensor is absent.
template <typename T>
T* slice_or_null(const at::Tensor& t, int64_t offset) {
  return t.defined() ? t.data_ptr<T>() + offset : nullptr;
}

// The inputs both directions read, for head bh: q, k and v with their row strides, the per-row mixture (contiguous).
template <typename T, typename Head, typename Tensors>
void point_at_inputs(const GmmParams& p, const Tensors& t, int64_t bh, Head& h) {
  const int64_t T_len = p.query_len, K = p.components, H = p.heads;
  point_at_rows<T>(t.q, H, bh, h.q, h.q_stride);
  point_at_rows<T>(t.k, H, bh, h.k, h.k_stride);
  point_at_rows<T>(t.v, H, bh, h.v, h.v_stride);
  h.omega = t.omega.template data_ptr<T>() + bh * T_len * K;
  h.mu = t.mu.template data_ptr<T>() + bh * T_len * K;
  h.sigma = t.sigma.template data_ptr<T>() + bh * T_len * K;
  h.gate = t.gate.template data_ptr<T>() + bh * T_len;
  h.center = slice_or_null<T>(t.local_center, bh * T_len);
  h.width = slice_or_null<T>(t.local_width, bh * T_len);
}

template <typename T>
ForwardHead<T> forward_head(const GmmParams& p, const ForwardTensors& t, int64_t bh) {
  const int64_t T_len = p.query_len, S = p.key_len, H = p.heads;
  ForwardHead<T> h;
  point_at_inputs<T>(p, t, bh, h);
  point_at_rows<T>(t.out, H, bh, h.out, h.out_stride);
  h.lse = t.lse.data_ptr<T>() + bh * T_len;
  h.log_mass = t.log_mass.data_ptr<T>() + bh * T_len;
  h.ctx_a = t.alpha_context.data_ptr<T>() + bh * T_len * p.value_dim;
  h.ctx_b = t.beta_context.data_ptr<T>() + bh * T_len * p.value_dim;
  h.alpha = slice_or_null<T>(t.alpha, bh * T_len * S);
  h.beta = slice_or_null<T>(t.beta, bh * T_len * S);
  return h;
}

template <typename T>
struct ForwardScratch {
  std::vector<T> scores, betas, acc_a, acc_b;
  std::vector<T> kt;     // (D, ld) the keys of head `kt_head` transposed, zero beyond its real keys
  int64_t ld;            // padded(key_len)
  int64_t kt_head = -1;  // (sentence, head) whose keys kt holds
  BlockSetup<T> setup;
  ForwardScratch(const GmmParams& p)
      : scores(kQueryBlock * kKeyTile), betas(kQueryBlock * kKeyTile), acc_a(padded<T>(kQueryBlock * p.value_dim)),
        acc_b(padded<T>(kQueryBlock * p.value_dim)), kt(p.head_dim * padded<T>(p.key_len)), ld(padded<T>(p.key_len)),
        setup(p.components) {}

  // The transposed keys of head bh (tasks of one thread take a head's query blocks in turn: one copy per head).
  const T* keys_of(const GmmParams& p, const ForwardHead<T>& h, int64_t bh, int64_t n_keys) {
    if (kt_head != bh) transpose_padded(h.k, h.k_stride, n_keys, p.head_dim, kt.data(), ld);
    kt_head = bh;
    return kt.data();
  }
};

// Contexts, output and row statistics of a finished block.
template <typename T>
void finish_block(const GmmParams& p, const ForwardHead<T>& h, int64_t first_row, int64_t n_rows,
                  const OnlineSoftmax<T>* state, const T* mass, ForwardScratch<T>& w) {
  using Vec = Vectorized<T>;
  static_assert(kQueryBlock % Vec::size() == 0, "a block's row statistics are whole vectors");
  const int64_t Dv = p.value_dim;
  // log of each row's softmax sum and mixture mass, vectorised over the block (1 for rows without keys or mass)
  T log_sum[kQueryBlock], log_mass[kQueryBlock];
  for (int64_t r = 0; r < kQueryBlock; ++r) {
    log_sum[r] = r < n_rows && state[r].sum > T(0) ? state[r].sum : T(1);
    log_mass[r] = r < n_rows && mass[r] > T(0) ? mass[r] : T(1);
  }
  for (int64_t r = 0; r < kQueryBlock; r += Vec::size()) {
    Vec::loadu(log_sum + r).log().store(log_sum + r);
    Vec::loadu(log_mass + r).log().store(log_mass + r);
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t i = first_row + r;
    const T inv_a = state[r].inverse_sum();
    const T inv_b = w.setup.beta_scale[r] = beta_scale(p, mass[r]);
    const T g = h.gate[i];
    int64_t c = 0;
    for (; c + Vec::size() <= Dv; c += Vec::size()) {
      const Vec ca = Vec::loadu(&w.acc_a[r * Dv + c]) * Vec(inv_a), cb = Vec::loadu(&w.acc_b[r * Dv + c]) * Vec(inv_b);
      ca.store(h.ctx_a + i * Dv + c);
      cb.store(h.ctx_b + i * Dv + c);
      (Vec(T(1) - g) * ca + Vec(g) * cb).store(h.out + i * h.out_stride + c);
    }
    for (; c < Dv; ++c) {
      const T ca = w.acc_a[r * Dv + c] * inv_a, cb = w.acc_b[r * Dv + c] * inv_b;
      h.ctx_a[i * Dv + c] = ca;
      h.ctx_b[i * Dv + c] = cb;
      h.out[i * h.out_stride + c] = (T(1) - g) * ca + g * cb;
    }
    h.lse[i] = state[r].sum > T(0) ? state[r].max + log_sum[r] : negative_infinity<T>();  // OnlineSoftmax::log_sum_exp
    h.log_mass[i] = mass[r] > T(0) ? w.setup.shift[r] + log_mass[r] : negative_infinity<T>();
  }
}

// Writes the (T, S) weights alpha and beta of a finished block (analysis only). Padding keys keep their zeros.
template <typename T>
void write_weights(const GmmParams& p, const ForwardHead<T>& h, const T* pos, int64_t first_row, int64_t n_rows,
                   int64_t n_keys, const OnlineSoftmax<T>* state, ForwardScratch<T>& w) {
  const int64_t S = p.key_len, D = p.head_dim, K = p.components;
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, n_keys - j0);
    const int64_t n_pad = padded<T>(n);
    tile_product<T>(h.q + first_row * h.q_stride, h.q_stride, n_rows, w.kt.data() + j0, w.ld, n_pad, D, T(p.scale),
                    w.scores.data(), kKeyTile);
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t i = first_row + r;
      T* s = w.scores.data() + r * kKeyTile;
      if (p.has_local_bias) add_local_bias(w.setup.local[r], pos + j0, n, s);
      // exp(s - max) / sum like torch.softmax; exp(s - lse) would carry lse's rounding, |lse| * eps relative.
      exp_shifted_sum(s, n, state[r].max);
      scale_row(s, n, state[r].inverse_sum());
      std::copy(s, s + n, h.alpha + i * S + j0);
      T* beta = w.betas.data() + r * kKeyTile;  // padded(n) values
      mixture_row(w.setup.comps.data() + r * K, K, pos + j0, n, beta);
      scale_row(beta, n, w.setup.beta_scale[r]);
      std::copy(beta, beta + n, h.beta + i * S + j0);
    }
  }
}

// One block of query rows of one (sentence, head): the forward pass.
template <typename T>
void forward_block(const GmmParams& p, const ForwardHead<T>& h, const T* kt, const T* pos, int64_t first_row,
                   int64_t n_rows, int64_t n_keys, ForwardScratch<T>& w) {
  const int64_t D = p.head_dim, Dv = p.value_dim, K = p.components;
  w.setup.load(p, h.omega, h.mu, h.sigma, h.center, h.width, first_row, n_rows, n_keys);
  OnlineSoftmax<T> state[kQueryBlock];
  T mass[kQueryBlock] = {};
  if (n_keys == 0) {  // a sentence without keys: zero contexts (otherwise the first tile writes the accumulators)
    std::fill(w.acc_a.begin(), w.acc_a.begin() + n_rows * Dv, T(0));
    std::fill(w.acc_b.begin(), w.acc_b.begin() + n_rows * Dv, T(0));
  }
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, n_keys - j0), n_pad = padded<T>(n);
    // (n_rows, n_pad) = q_block (n_rows, D) @ kt[:, j0:j0+n_pad] (D, n_pad); columns from n on are zero keys
    tile_product<T>(h.q + first_row * h.q_stride, h.q_stride, n_rows, kt + j0, w.ld, n_pad, D, T(p.scale),
                    w.scores.data(), kKeyTile);
    for (int64_t r = 0; r < n_rows; ++r) {
      T* s = w.scores.data() + r * kKeyTile;
      if (p.has_local_bias) add_local_bias(w.setup.local[r], pos + j0, n_pad, s);
      fill_tail(s, n, negative_infinity<T>());  // weight exp(-inf) = 0 for the columns past the real keys
      const T factor = state[r].raise_max(row_max(s, n_pad));
      if (factor != T(1) && j0 > 0) scale_row(w.acc_a.data() + r * Dv, Dv, factor);  // acc is unset before tile 0
      state[r].add(exp_shifted_sum(s, n_pad, state[r].max));
      mass[r] += mixture_row(w.setup.comps.data() + r * K, K, pos + j0, n, w.betas.data() + r * kKeyTile);
    }
    // acc (n_rows, Dv) += weights (n_rows, n) @ v[j0:j0+n] (n, Dv), for both attentions
    accumulate_pair<T>(w.scores.data(), w.betas.data(), kKeyTile, n_rows, n, h.v + j0 * h.v_stride, h.v_stride, Dv,
                       w.acc_a.data(), w.acc_b.data(), j0 == 0);
  }
  finish_block(p, h, first_row, n_rows, state, mass, w);
  if (h.alpha != nullptr) write_weights(p, h, pos, first_row, n_rows, n_keys, state, w);
}

template <typename T>
void forward_typed(const GmmParams& p, ForwardTensors& t) {
  const std::vector<T> pos = key_positions<T>(p.key_len);
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const int64_t blocks = (p.query_len + kQueryBlock - 1) / kQueryBlock;
  at::parallel_for(0, p.batch * p.heads * blocks, 1, [&](int64_t begin, int64_t end) {
    ForwardScratch<T> scratch(p);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / blocks, first_row = (task % blocks) * kQueryBlock;
      const int64_t n_rows = std::min(kQueryBlock, p.query_len - first_row);
      const ForwardHead<T> h = forward_head<T>(p, t, bh);
      const int64_t n_keys = keys_of_sentence(lengths, bh / p.heads, p.key_len);
      forward_block<T>(p, h, scratch.keys_of(p, h, bh, n_keys), pos.data(), first_row, n_rows, n_keys, scratch);
    }
  });
}

#include "gmm/cpu/gmm_backward.h"

}  // namespace

void gmm_forward(const GmmParams& p, ForwardTensors& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q.scalar_type(), "mma_nmt::gmm_attention cpu forward",
                             [&] { forward_typed<scalar_t>(p, t); });
}

void gmm_backward(const GmmParams& p, BackwardTensors& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q.scalar_type(), "mma_nmt::gmm_attention cpu backward",
                             [&] { backward_typed<scalar_t>(p, t); });
}

}  // namespace mma_nmt::gmm::cpu::MMA_NMT_CPU_ISA
