// Fused attention on the CPU: tiled online softmax over the interval of keys each head kind allows (head_mask.h).
// Included by attention_kernel_<isa>.cpp after it has chosen the instruction set (CPU_CAPABILITY), so every build of
// these templates lives in its own namespace.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <vector>

#include "attention/cpu/kernel_api.h"
#include "attention/dropout_hash.h"
#include "attention/head_mask.h"
#include "attention/online_softmax.h"

namespace mma_nmt::attention::cpu::MMA_NMT_CPU_ISA {
namespace {

#include "attention/cpu/tile_math.h"

constexpr int64_t kQueryBlock = 16;  // query rows that share one pass over a key tile
constexpr int64_t kKeyTile = 128;    // keys scored at once; a tile's scores stay in L1

// Visible key intervals of a block of query rows, and their union.
struct BlockRanges {
  KeyRange rows[kQueryBlock];
  KeyRange all{0, 0};

  BlockRanges(const AttentionParams& p, int64_t kind, int64_t first_row, int64_t n_rows, int64_t n_keys) {
    int64_t begin = n_keys, end = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      rows[r] = visible_keys(kind, first_row + r + p.query_offset, p.window, n_keys);
      if (!rows[r].empty()) {
        begin = std::min(begin, rows[r].begin);
        end = std::max(end, rows[r].end);
      }
    }
    all = KeyRange{begin, end};
  }
  // Row r's visible part of the tile [tile_begin, tile_begin + n), relative to tile_begin.
  KeyRange in_tile(int64_t r, int64_t tile_begin, int64_t n) const {
    return KeyRange{std::max(rows[r].begin, tile_begin) - tile_begin, std::min(rows[r].end, tile_begin + n) - tile_begin};
  }
};

// Multiplies the weights of row `row` (tile columns [first, last)) by the dropout keep factor: 0 or 1/(1-p).
template <typename T>
void apply_dropout(const AttentionParams& p, int64_t b, int64_t h, int64_t row, int64_t tile_begin, KeyRange cols,
                   T* weights) {
  const uint32_t threshold = dropout_threshold(p.dropout_p);
  const T keep_scale = T(1.0 / (1.0 - p.dropout_p));
  const uint64_t row_base = static_cast<uint64_t>(((b * p.heads + h) * p.query_len + row) * p.key_len + tile_begin);
  for (int64_t c = cols.begin; c < cols.end; ++c) {
    weights[c] *= dropout_bits(p.seed, row_base + c) >= threshold ? keep_scale : T(0);
  }
}

template <typename T>
void zero_outside(T* row, int64_t n, KeyRange keep) {
  std::fill(row, row + std::max<int64_t>(keep.begin, 0), T(0));
  std::fill(row + std::min(std::max<int64_t>(keep.end, 0), n), row + n, T(0));
}

// One block of query rows of one (sentence, head): the forward pass.
template <typename T>
void forward_block(const AttentionParams& p, int64_t b, int64_t h, int64_t first_row, int64_t n_rows, int64_t n_keys,
                   const T* q, const T* keys_t, const T* v, T* out, T* lse, T* probs, std::vector<T>& scores,
                   std::vector<T>& acc) {
  const int64_t D = p.head_dim, Dv = p.value_dim, S = p.key_len;
  const BlockRanges ranges(p, p.head_kinds[h], first_row, n_rows, n_keys);
  OnlineSoftmax<T> state[kQueryBlock];
  std::fill(acc.begin(), acc.begin() + n_rows * Dv, T(0));
  for (int64_t j0 = ranges.all.begin; j0 < ranges.all.end; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, ranges.all.end - j0);
    // (n_rows, n) = q_block (n_rows, D) @ keys_t[:, j0:j0+n] (D, n)
    tile_product<T>(q + first_row * D, D, n_rows, keys_t + j0, S, n, D, T(p.scale), scores.data(), kKeyTile);
    for (int64_t r = 0; r < n_rows; ++r) {
      T* s = scores.data() + r * kKeyTile;
      const KeyRange cols = ranges.in_tile(r, j0, n);
      if (cols.empty()) {
        std::fill(s, s + n, T(0));
        continue;
      }
      const T factor = state[r].raise_max(row_max(s + cols.begin, cols.size()));
      if (factor != T(1)) scale_row(acc.data() + r * Dv, Dv, factor);
      state[r].add(exp_shifted_sum(s + cols.begin, cols.size(), state[r].max));
      zero_outside(s, n, cols);
      if (p.dropout_p > 0) apply_dropout(p, b, h, first_row + r, j0, cols, s);
    }
    // acc (n_rows, Dv) += weights (n_rows, n) @ v[j0:j0+n] (n, Dv)
    accumulate_products<T>(scores.data(), kKeyTile, 1, n_rows, n, v + j0 * Dv, Dv, Dv, acc.data(), Dv);
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    T* o = out + (first_row + r) * Dv;
    std::copy(acc.data() + r * Dv, acc.data() + (r + 1) * Dv, o);
    scale_row(o, Dv, state[r].inverse_sum());
    lse[first_row + r] = state[r].log_sum_exp();
  }
  if (probs == nullptr) return;
  for (int64_t j0 = ranges.all.begin; j0 < ranges.all.end; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, ranges.all.end - j0);
    tile_product<T>(q + first_row * D, D, n_rows, keys_t + j0, S, n, D, T(p.scale), scores.data(), kKeyTile);
    for (int64_t r = 0; r < n_rows; ++r) {
      const KeyRange cols = ranges.in_tile(r, j0, n);
      T* dst = probs + (first_row + r) * S + j0;
      for (int64_t c = cols.begin; c < cols.end; ++c) {
        dst[c] = state[r].probability(scores[r * kKeyTile + c]);
      }
    }
  }
}

template <typename T>
void forward_typed(const AttentionParams& p, ForwardTensors& t) {
  const int64_t T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const at::Tensor keys_t = t.k.transpose(-1, -2).contiguous();  // (B, H, D, S)
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const int64_t blocks = (T_len + kQueryBlock - 1) / kQueryBlock;
  const T* q = t.q.data_ptr<T>();
  const T* kt = keys_t.data_ptr<T>();
  const T* v = t.v.data_ptr<T>();
  T* out = t.out.data_ptr<T>();
  T* lse = t.lse.data_ptr<T>();
  T* probs = t.probs.defined() ? t.probs.data_ptr<T>() : nullptr;
  at::parallel_for(0, p.batch * p.heads * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> scores(kQueryBlock * kKeyTile), acc(kQueryBlock * Dv);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / blocks, first_row = (task % blocks) * kQueryBlock;
      const int64_t b = bh / p.heads, h = bh % p.heads;
      const int64_t n_rows = std::min(kQueryBlock, T_len - first_row);
      forward_block<T>(p, b, h, first_row, n_rows, keys_of_sentence(lengths, b, S), q + bh * T_len * D,
                       kt + bh * D * S, v + bh * S * Dv, out + bh * T_len * Dv, lse + bh * T_len,
                       probs ? probs + bh * T_len * S : nullptr, scores, acc);
    }
  });
}

// Scratch space of one backward task.
template <typename T>
struct BackwardScratch {
  std::vector<T> weights, grad_scores, grad_q, delta;
  BackwardScratch(int64_t head_dim, int64_t query_len)
      : weights(kQueryBlock * kKeyTile), grad_scores(kQueryBlock * kKeyTile), grad_q(kQueryBlock * head_dim),
        delta(query_len) {}
};

// Backward of one (sentence, head), all query rows: owns its slices of grad_k and grad_v, so no two tasks collide.
template <typename T>
void backward_head(const AttentionParams& p, int64_t b, int64_t h, int64_t n_keys, const T* dout, const T* q,
                   const T* k, const T* keys_t, const T* values_t, const T* out, const T* lse, T* dq, T* dk, T* dv,
                   BackwardScratch<T>& w) {
  const int64_t T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const T scale = T(p.scale);
  for (int64_t i = 0; i < T_len; ++i) w.delta[i] = dot(dout + i * Dv, out + i * Dv, Dv);  // rowsum(dO * O)
  for (int64_t first_row = 0; first_row < T_len; first_row += kQueryBlock) {
    const int64_t n_rows = std::min(kQueryBlock, T_len - first_row);
    const BlockRanges ranges(p, p.head_kinds[h], first_row, n_rows, n_keys);
    std::fill(w.grad_q.begin(), w.grad_q.begin() + n_rows * D, T(0));
    for (int64_t j0 = ranges.all.begin; j0 < ranges.all.end; j0 += kKeyTile) {
      const int64_t n = std::min(kKeyTile, ranges.all.end - j0);
      tile_product<T>(q + first_row * D, D, n_rows, keys_t + j0, S, n, D, scale, w.weights.data(), kKeyTile);
      tile_product<T>(dout + first_row * Dv, Dv, n_rows, values_t + j0, S, n, Dv, T(1), w.grad_scores.data(),
                      kKeyTile);
      for (int64_t r = 0; r < n_rows; ++r) {
        T* prob = w.weights.data() + r * kKeyTile;  // logits in, dropped probabilities out
        T* grad = w.grad_scores.data() + r * kKeyTile;  // dO . v in, d(logit) * scale out
        const T row_lse = lse[first_row + r];
        KeyRange cols = ranges.in_tile(r, j0, n);
        if (row_lse == negative_infinity<T>()) cols = KeyRange{0, 0};
        if (!cols.empty()) exp_shifted(prob + cols.begin, cols.size(), row_lse);
        zero_outside(prob, n, cols);
        zero_outside(grad, n, cols);
        // Without dropout grad = P (dP - delta). With it, P' = P z and dP' = dP z where z is the keep factor.
        if (p.dropout_p > 0) {
          for (int64_t c = cols.begin; c < cols.end; ++c) grad[c] *= prob[c];  // P dP, before z
          apply_dropout(p, b, h, first_row + r, j0, cols, grad);              // P dP z
          for (int64_t c = cols.begin; c < cols.end; ++c) grad[c] -= prob[c] * w.delta[first_row + r];
          apply_dropout(p, b, h, first_row + r, j0, cols, prob);  // P z, the weights the output used
        } else if (!cols.empty()) {
          softmax_grad_row(prob + cols.begin, grad + cols.begin, cols.size(), w.delta[first_row + r]);
        }
        scale_row(grad, n, scale);
      }
      // grad_v[j0:j0+n] (n, Dv) += P'^T (n, n_rows) @ dO_block (n_rows, Dv)
      accumulate_products<T>(w.weights.data(), 1, kKeyTile, n, n_rows, dout + first_row * Dv, Dv, Dv, dv + j0 * Dv, Dv);
      // grad_k[j0:j0+n] (n, D) += dS^T (n, n_rows) @ q_block (n_rows, D)
      accumulate_products<T>(w.grad_scores.data(), 1, kKeyTile, n, n_rows, q + first_row * D, D, D, dk + j0 * D, D);
      // grad_q_block (n_rows, D) += dS (n_rows, n) @ k[j0:j0+n] (n, D)
      accumulate_products<T>(w.grad_scores.data(), kKeyTile, 1, n_rows, n, k + j0 * D, D, D, w.grad_q.data(), D);
    }
    std::copy(w.grad_q.begin(), w.grad_q.begin() + n_rows * D, dq + first_row * D);
  }
}

template <typename T>
void backward_typed(const AttentionParams& p, BackwardTensors& t) {
  const int64_t T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const at::Tensor keys_t = t.k.transpose(-1, -2).contiguous();    // (B, H, D, S)
  const at::Tensor values_t = t.v.transpose(-1, -2).contiguous();  // (B, H, Dv, S)
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const T *dout = t.grad_out.data_ptr<T>(), *q = t.q.data_ptr<T>(), *k = t.k.data_ptr<T>();
  const T *kt = keys_t.data_ptr<T>(), *vt = values_t.data_ptr<T>(), *out = t.out.data_ptr<T>();
  const T* lse = t.lse.data_ptr<T>();
  T *dq = t.grad_q.data_ptr<T>(), *dk = t.grad_k.data_ptr<T>(), *dv = t.grad_v.data_ptr<T>();
  at::parallel_for(0, p.batch * p.heads, 1, [&](int64_t begin, int64_t end) {
    BackwardScratch<T> scratch(D, T_len);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / p.heads, h = bh % p.heads;
      backward_head<T>(p, b, h, keys_of_sentence(lengths, b, S), dout + bh * T_len * Dv, q + bh * T_len * D,
                       k + bh * S * D, kt + bh * D * S, vt + bh * Dv * S, out + bh * T_len * Dv, lse + bh * T_len,
                       dq + bh * T_len * D, dk + bh * S * D, dv + bh * S * Dv, scratch);
    }
  });
}

}  // namespace

void attention_forward(const AttentionParams& p, ForwardTensors& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q.scalar_type(), "mma_nmt::attention cpu forward", [&] { forward_typed<scalar_t>(p, t); });
}

void attention_backward(const AttentionParams& p, BackwardTensors& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q.scalar_type(), "mma_nmt::attention cpu backward",
                             [&] { backward_typed<scalar_t>(p, t); });
}

}  // namespace mma_nmt::attention::cpu::MMA_NMT_CPU_ISA
