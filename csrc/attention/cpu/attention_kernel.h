// Fused attention on the CPU: tiled online softmax over the interval of keys each head kind allows (head_mask.h).
// Included by attention_kernel_<isa>.cpp after it has chosen the instruction set (CPU_CAPABILITY), so every build of
// these templates lives in its own namespace.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "attention/cpu/kernel_api.h"
#include "attention/dropout_hash.h"
#include "attention/head_mask.h"
#include "attention/online_softmax.h"

namespace mma_nmt::attention::cpu::MMA_NMT_CPU_ISA {
namespace {

#include "attention/cpu/attention_tiles.h"

constexpr int64_t kQueryBlock = 16;     // forward: query rows that share one pass over a key tile
constexpr int64_t kBackwardBlock = 32;  // backward: the same; larger, so each read-modify-write of a grad_k/grad_v
                                        // register block serves 32 query rows instead of 16
constexpr int64_t kKeyTile = 128;       // keys scored at once (a multiple of every vector width)
static_assert(kKeyTile % 16 == 0, "key tiles start on vector boundaries");
static_assert(kBackwardBlock >= kQueryBlock, "BlockRanges holds up to kBackwardBlock rows");

// Visible key intervals of a block of query rows. For every head kind both ends of the interval are non-decreasing in
// the row (head_mask.h), so the rows that see a given run of keys are themselves a run, found by binary search. Rows
// that see no key keep their (empty, still monotone) interval from visible_keys: begin >= n_keys or end <= 0.
struct BlockRanges {
  KeyRange rows[kBackwardBlock];
  KeyRange all{0, 0};  // union of the rows' intervals
  int64_t n_rows;

  BlockRanges(const AttentionParams& p, int64_t kind, int64_t first_row, int64_t n_rows_, int64_t n_keys)
      : n_rows(n_rows_) {
    int64_t begin = n_keys, end = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      rows[r] = visible_keys(kind, first_row + r + p.query_offset, p.window, n_keys);
      if (rows[r].empty()) continue;
      begin = std::min(begin, rows[r].begin);
      end = std::max(end, rows[r].end);
    }
    all = begin < end ? KeyRange{begin, end} : KeyRange{0, 0};
  }
  // Row r's visible part of the tile [tile_begin, tile_begin + n), relative to tile_begin (possibly empty).
  KeyRange in_tile(int64_t r, int64_t tile_begin, int64_t n) const {
    return KeyRange{std::max(rows[r].begin, tile_begin) - tile_begin, std::min(rows[r].end, tile_begin + n) - tile_begin};
  }
  // Union of in_tile over rows [r0, r1); {0, 0} when none of them sees the tile.
  KeyRange union_in_tile(int64_t r0, int64_t r1, int64_t tile_begin, int64_t n) const {
    int64_t begin = n, end = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const KeyRange c = in_tile(r, tile_begin, n);
      if (c.empty()) continue;
      begin = std::min(begin, c.begin);
      end = std::max(end, c.end);
    }
    return begin < end ? KeyRange{begin, end} : KeyRange{0, 0};
  }
  // Rows (a run [first, last)) that see at least one key of [k0, k1), k0 < k1: those with end > k0 and begin < k1.
  // Both conditions hold on a suffix and a prefix of the rows, as the ends are monotone; an empty row fails one.
  KeyRange rows_seeing(int64_t k0, int64_t k1) const {
    const KeyRange* first = std::partition_point(rows, rows + n_rows, [k0](const KeyRange& r) { return r.end <= k0; });
    const KeyRange* last = std::partition_point(first, rows + n_rows, [k1](const KeyRange& r) { return r.begin < k1; });
    return KeyRange{first - rows, last - rows};
  }
};

// Multiplies the weights of row `row` (tile columns `cols`) by the dropout keep factor: 0 or 1/(1-p).
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

// Scores (rows, tile columns) = alpha * rows (n_rows, depth) @ cols_t[:, tile] for a block of rows, four at a time, each
// group only over the vectors of columns that one of its rows can see.
template <typename T>
void score_block_rows(const BlockRanges& ranges, const T* rows, int64_t depth, const T* cols_t, int64_t ld,
                      int64_t j0, int64_t n, T alpha, T* scores) {
  constexpr int64_t G = Blocking<T>::kRows;
  for (int64_t g = 0; g < ranges.n_rows; g += G) {
    const int64_t rows_in_group = std::min(G, ranges.n_rows - g);
    const KeyRange u = ranges.union_in_tile(g, g + rows_in_group, j0, n);
    if (u.empty()) continue;
    score_group<T>(rows + g * depth, depth, rows_in_group, cols_t + j0, ld, round_down_to_vector<T>(u.begin),
                   round_up_to_vector<T>(u.end), depth, alpha, scores + g * kKeyTile, kKeyTile);
  }
}

// One row of a tile in the forward pass: logits in, weights exp(logit - running max) out, 0 outside `cols` over
// [0, width). Returns the factor by which the row's accumulated output must be rescaled.
template <typename T>
T forward_softmax_row(T* s, int64_t width, KeyRange cols, OnlineSoftmax<T>& state) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  if (cols.empty()) {
    fill_zero(s, 0, width);
    return T(1);
  }
  const int64_t c0 = round_down_to_vector<T>(cols.begin), c1 = round_up_to_vector<T>(cols.end);
  Vec high(negative_infinity<T>());
  for (int64_t c = c0; c < c1; c += V) {
    const Vec x = keep_lanes(Vec::loadu(s + c), c, cols, negative_infinity<T>());
    x.store(s + c);
    high = at::vec::maximum(high, x);
  }
  const T factor =
      state.raise_max(at::vec::vec_reduce_all<T>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, high));
  const Vec shift(state.max);
  Vec sum(T(0));
  for (int64_t c = c0; c < c1; c += V) {
    const Vec e = exp_vec(Vec::loadu(s + c) - shift);
    e.store(s + c);
    sum = sum + e;
  }
  state.add(at::vec::vec_reduce_all<T>([](Vec& a, Vec& b) { return a + b; }, sum));
  fill_zero(s, 0, c0);
  fill_zero(s, c1, width);
  return factor;
}

// Scratch space of one forward task: the packed keys of the head in hand, a tile of scores and the block's outputs.
template <typename T>
struct ForwardScratch {
  std::vector<T> keys_t, scores, acc;
  int64_t packed_head = -1;
  ForwardScratch(int64_t head_dim, int64_t value_dim, int64_t ld)
      : keys_t(head_dim * ld), scores(kQueryBlock * kKeyTile), acc(kQueryBlock * value_dim) {}
};

// The (n_rows, S) probabilities of a finished block, for return_probs: exp(logit - max) / sum from each row's finished
// softmax state (as accurate as a softmax; exp(logit - lse) would carry lse's rounding, |lse| * eps).
template <typename T>
void write_block_probs(const AttentionParams& p, const BlockRanges& ranges, int64_t first_row, const T* q,
                       const T* keys_t, int64_t ld, const OnlineSoftmax<T>* state, T* probs, T* scores) {
  const int64_t D = p.head_dim, S = p.key_len;
  for (int64_t j0 = round_down_to_vector<T>(ranges.all.begin); j0 < ranges.all.end; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, ranges.all.end - j0);
    score_block_rows<T>(ranges, q + first_row * D, D, keys_t, ld, j0, n, T(p.scale), scores);
    for (int64_t r = 0; r < ranges.n_rows; ++r) {
      const KeyRange cols = ranges.in_tile(r, j0, n);
      T* dst = probs + (first_row + r) * S + j0;
      for (int64_t c = cols.begin; c < cols.end; ++c) {
        dst[c] = state[r].probability(scores[r * kKeyTile + c]);
      }
    }
  }
}

// One block of query rows of one (sentence, head): the forward pass.
template <typename T>
void forward_block(const AttentionParams& p, int64_t b, int64_t h, int64_t first_row, int64_t n_rows, int64_t n_keys,
                   const T* q, const T* keys_t, int64_t ld, const T* v, T* out, T* lse, T* probs, ForwardScratch<T>& w) {
  const int64_t D = p.head_dim, Dv = p.value_dim;
  const BlockRanges ranges(p, p.head_kinds[h], first_row, n_rows, n_keys);
  OnlineSoftmax<T> state[kQueryBlock];
  T* scores = w.scores.data();
  T* acc = w.acc.data();
  store_zeros(acc, n_rows * Dv);
  for (int64_t j0 = round_down_to_vector<T>(ranges.all.begin); j0 < ranges.all.end; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, ranges.all.end - j0);
    // (n_rows, n) = q_block (n_rows, D) @ keys_t[:, j0:j0+n] (D, n)
    score_block_rows<T>(ranges, q + first_row * D, D, keys_t, ld, j0, n, T(p.scale), scores);
    for (int64_t r = 0; r < n_rows; ++r) {
      const KeyRange cols = ranges.in_tile(r, j0, n);
      const bool nothing_yet = state[r].max == negative_infinity<T>();  // then the row of acc is still zero
      const T factor = forward_softmax_row(scores + r * kKeyTile, round_up_to_vector<T>(n), cols, state[r]);
      if (factor != T(1) && !nothing_yet) scale_row(acc + r * Dv, Dv, factor);
      if (p.dropout_p > 0 && !cols.empty()) apply_dropout(p, b, h, first_row + r, j0, cols, scores + r * kKeyTile);
    }
    // acc (n_rows, Dv) += weights (n_rows, n) @ v[j0:j0+n] (n, Dv)
    accumulate_products<T>(
        scores, kKeyTile, 1, n_rows, [&](int64_t r0, int64_t r1) { return ranges.union_in_tile(r0, r1, j0, n); },
        v + j0 * Dv, Dv, Dv, acc, Dv);
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    scale_row_to(acc + r * Dv, Dv, state[r].inverse_sum(), out + (first_row + r) * Dv);
    lse[first_row + r] = state[r].log_sum_exp();
  }
  if (probs != nullptr) write_block_probs(p, ranges, first_row, q, keys_t, ld, state, probs, scores);
}

template <typename T>
void forward_typed(const AttentionParams& p, ForwardTensors& t) {
  const int64_t T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const int64_t ld = packed_row_length<T>(S);  // row length of the packed keys
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const int64_t blocks = (T_len + kQueryBlock - 1) / kQueryBlock;
  const T* q = t.q.data_ptr<T>();
  const T* k = t.k.data_ptr<T>();
  const T* v = t.v.data_ptr<T>();
  T* out = t.out.data_ptr<T>();
  T* lse = t.lse.data_ptr<T>();
  T* probs = t.probs.defined() ? t.probs.data_ptr<T>() : nullptr;
  // Tasks are (sentence, head, query block), head-major, so a thread packs the keys of a head once for all its blocks.
  at::parallel_for(0, p.batch * p.heads * blocks, 1, [&](int64_t begin, int64_t end) {
    ForwardScratch<T> scratch(D, Dv, ld);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / blocks, first_row = (task % blocks) * kQueryBlock;
      const int64_t b = bh / p.heads, h = bh % p.heads;
      const int64_t n_rows = std::min(kQueryBlock, T_len - first_row);
      const int64_t n_keys = keys_of_sentence(lengths, b, S);
      if (scratch.packed_head != bh) {
        pack_transposed(k + bh * S * D, n_keys, D, scratch.keys_t.data(), ld);  // (D, ld)
        scratch.packed_head = bh;
      }
      forward_block<T>(p, b, h, first_row, n_rows, n_keys, q + bh * T_len * D, scratch.keys_t.data(), ld,
                       v + bh * S * Dv, out + bh * T_len * Dv, lse + bh * T_len,
                       probs ? probs + bh * T_len * S : nullptr, scratch);
    }
  });
}

// Scratch space of one backward task.
template <typename T>
struct BackwardScratch {
  std::vector<T> keys_t, values_t, weights, grad_scores, grad_q, delta;
  BackwardScratch(int64_t head_dim, int64_t value_dim, int64_t ld, int64_t query_len)
      : keys_t(head_dim * ld), values_t(value_dim * ld), weights(kBackwardBlock * kKeyTile),
        grad_scores(kBackwardBlock * kKeyTile), grad_q(kBackwardBlock * head_dim), delta(query_len) {}
};

// One row of a tile in the backward pass. In: logits `prob` and dO . v `grad`. Out: the weights the output used (P z)
// and d(logit) * scale, both 0 outside `cols` over [0, width).
template <typename T>
void backward_softmax_row(const AttentionParams& p, int64_t b, int64_t h, int64_t row, int64_t j0, T* prob, T* grad,
                          int64_t width, KeyRange cols, T row_lse, T delta, T scale) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  if (row_lse == negative_infinity<T>()) cols = KeyRange{0, 0};
  if (cols.empty()) {
    fill_zero(prob, 0, width);
    fill_zero(grad, 0, width);
    return;
  }
  const int64_t c0 = round_down_to_vector<T>(cols.begin), c1 = round_up_to_vector<T>(cols.end);
  const Vec lse_v(row_lse), delta_v(delta), scale_v(scale);
  const bool dropout = p.dropout_p > 0;
  for (int64_t c = c0; c < c1; c += V) {
    const Vec pr = exp_vec(keep_lanes(Vec::loadu(prob + c), c, cols, negative_infinity<T>()) - lse_v);
    pr.store(prob + c);
    const Vec g = keep_lanes(Vec::loadu(grad + c), c, cols, T(0));
    // Without dropout d(logit) = P (dP - delta).
    (dropout ? g : (pr * (g - delta_v)) * scale_v).store(grad + c);
  }
  if (dropout) {  // P' = P z and dP' = dP z with z the keep factor
    for (int64_t c = cols.begin; c < cols.end; ++c) grad[c] *= prob[c];  // P dP, before z
    apply_dropout(p, b, h, row, j0, cols, grad);                        // P dP z
    for (int64_t c = cols.begin; c < cols.end; ++c) grad[c] -= prob[c] * delta;
    apply_dropout(p, b, h, row, j0, cols, prob);  // P z, the weights the output used
    scale_row(grad + c0, c1 - c0, scale);
  }
  fill_zero(prob, 0, c0);
  fill_zero(prob, c1, width);
  fill_zero(grad, 0, c0);
  fill_zero(grad, c1, width);
}

// Backward of one (sentence, head), all query rows: owns its slices of grad_k and grad_v (zeroes them here, where they
// stay in cache for the accumulation, rather than in a separate pass over the whole tensors), so no two tasks collide.
template <typename T>
void backward_head(const AttentionParams& p, int64_t b, int64_t h, int64_t n_keys, const T* dout, const T* q,
                   const T* k, const T* v, const T* out, const T* lse, T* dq, T* dk, T* dv, BackwardScratch<T>& w) {
  const int64_t T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const int64_t ld = packed_row_length<T>(S);
  const T scale = T(p.scale);
  store_zeros(dk, S * D);  // this task's slices of grad_k (S, D) and grad_v (S, Dv), padding keys included
  store_zeros(dv, S * Dv);
  pack_transposed(k, n_keys, D, w.keys_t.data(), ld);     // (D, ld)
  pack_transposed(v, n_keys, Dv, w.values_t.data(), ld);  // (Dv, ld)
  for (int64_t i = 0; i < T_len; ++i) w.delta[i] = dot(dout + i * Dv, out + i * Dv, Dv);  // rowsum(dO * O)
  T* prob = w.weights.data();     // (kBackwardBlock, kKeyTile): logits in, dropped probabilities out
  T* grad = w.grad_scores.data();  // (kBackwardBlock, kKeyTile): dO . v in, d(logit) * scale out
  for (int64_t first_row = 0; first_row < T_len; first_row += kBackwardBlock) {
    const int64_t n_rows = std::min(kBackwardBlock, T_len - first_row);
    const BlockRanges ranges(p, p.head_kinds[h], first_row, n_rows, n_keys);
    store_zeros(w.grad_q.data(), n_rows * D);
    for (int64_t j0 = round_down_to_vector<T>(ranges.all.begin); j0 < ranges.all.end; j0 += kKeyTile) {
      const int64_t n = std::min(kKeyTile, ranges.all.end - j0);
      score_block_rows<T>(ranges, q + first_row * D, D, w.keys_t.data(), ld, j0, n, scale, prob);
      score_block_rows<T>(ranges, dout + first_row * Dv, Dv, w.values_t.data(), ld, j0, n, T(1), grad);
      for (int64_t r = 0; r < n_rows; ++r) {
        backward_softmax_row(p, b, h, first_row + r, j0, prob + r * kKeyTile, grad + r * kKeyTile,
                             round_up_to_vector<T>(n), ranges.in_tile(r, j0, n), lse[first_row + r],
                             w.delta[first_row + r], scale);
      }
      const auto rows_seeing = [&](int64_t x0, int64_t x1) { return ranges.rows_seeing(j0 + x0, j0 + x1); };
      const auto keys_seen = [&](int64_t r0, int64_t r1) { return ranges.union_in_tile(r0, r1, j0, n); };
      // grad_v[j0:j0+n] (n, Dv) += P'^T (n, n_rows) @ dO_block (n_rows, Dv)
      accumulate_products<T>(prob, 1, kKeyTile, n, rows_seeing, dout + first_row * Dv, Dv, Dv, dv + j0 * Dv, Dv);
      // grad_k[j0:j0+n] (n, D) += dS^T (n, n_rows) @ q_block (n_rows, D)
      accumulate_products<T>(grad, 1, kKeyTile, n, rows_seeing, q + first_row * D, D, D, dk + j0 * D, D);
      // grad_q_block (n_rows, D) += dS (n_rows, n) @ k[j0:j0+n] (n, D)
      accumulate_products<T>(grad, kKeyTile, 1, n_rows, keys_seen, k + j0 * D, D, D, w.grad_q.data(), D);
    }
    std::copy(w.grad_q.begin(), w.grad_q.begin() + n_rows * D, dq + first_row * D);
  }
}

template <typename T>
void backward_typed(const AttentionParams& p, BackwardTensors& t) {
  const int64_t T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const T *dout = t.grad_out.data_ptr<T>(), *q = t.q.data_ptr<T>(), *k = t.k.data_ptr<T>();
  const T *v = t.v.data_ptr<T>(), *out = t.out.data_ptr<T>();
  const T* lse = t.lse.data_ptr<T>();
  T *dq = t.grad_q.data_ptr<T>(), *dk = t.grad_k.data_ptr<T>(), *dv = t.grad_v.data_ptr<T>();
  at::parallel_for(0, p.batch * p.heads, 1, [&](int64_t begin, int64_t end) {
    BackwardScratch<T> scratch(D, Dv, packed_row_length<T>(S), T_len);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / p.heads, h = bh % p.heads;
      backward_head<T>(p, b, h, keys_of_sentence(lengths, b, S), dout + bh * T_len * Dv, q + bh * T_len * D,
                       k + bh * S * D, v + bh * S * Dv, out + bh * T_len * Dv, lse + bh * T_len, dq + bh * T_len * D,
                       dk + bh * S * D, dv + bh * S * Dv, scratch);
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
