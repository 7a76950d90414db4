// Building blocks of the CPU attention kernels: one block of query rows of one (sentence, head) forward, one
// (sentence, head) backward, on contiguous (len, dim) rows of that head. attention_kernel.h runs them over the heads of
// mma_nmt::attention; csrc/multilayer/cpu/ over heads gathered from per-layer projections. Included once per
// instruction set (after CPU_CAPABILITY is chosen), so every build of these templates lives in its own namespace.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "attention/attention_params.h"
#include "attention/dropout_hash.h"
#include "attention/head_mask.h"
#include "common/online_softmax.h"

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

// Scores (rows, tile columns) = alpha * rows (n_rows, depth; row stride row_stride) @ cols_t[:, tile] for a block of
// rows, four at a time, each group only over the vectors of columns that one of its rows can see.
template <typename T>
void score_block_rows(const BlockRanges& ranges, const T* rows, int64_t row_stride, int64_t depth, const T* cols_t,
                      int64_t ld, int64_t j0, int64_t n, T alpha, T* scores) {
  constexpr int64_t G = Blocking<T>::kRows;
  for (int64_t g = 0; g < ranges.n_rows; g += G) {
    const int64_t rows_in_group = std::min(G, ranges.n_rows - g);
    const KeyRange u = ranges.union_in_tile(g, g + rows_in_group, j0, n);
    if (u.empty()) continue;
    score_group<T>(rows + g * row_stride, row_stride, rows_in_group, cols_t + j0, ld, round_down_to_vector<T>(u.begin),
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
// softmax state (as accurate as a softmax; exp(logit - lse) would carry lse's rounding, |lse| * eps). `q_block` (row
// stride q_stride) and `probs_block` start at the block's first row.
template <typename T>
void write_block_probs(const AttentionParams& p, const BlockRanges& ranges, const T* q_block, int64_t q_stride,
                       const T* keys_t, int64_t ld, const OnlineSoftmax<T>* state, T* probs_block, T* scores) {
  const int64_t D = p.head_dim, S = p.key_len;
  for (int64_t j0 = round_down_to_vector<T>(ranges.all.begin); j0 < ranges.all.end; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, ranges.all.end - j0);
    score_block_rows<T>(ranges, q_block, q_stride, D, keys_t, ld, j0, n, T(p.scale), scores);
    for (int64_t r = 0; r < ranges.n_rows; ++r) {
      const KeyRange cols = ranges.in_tile(r, j0, n);
      T* dst = probs_block + r * S + j0;
      for (int64_t c = cols.begin; c < cols.end; ++c) {
        dst[c] = state[r].probability(scores[r * kKeyTile + c]);
      }
    }
  }
}

// Rows of one head as pieces side by side: piece s of row r starts at base[s] + r * stride and holds `width` values.
// A head of mma_nmt::attention is one piece, its contiguous (len, dim) slice; a fused head of
// mma_nmt::multilayer_attention has one piece per encoder layer, read in place from that layer's (B, L, E) projection
// (csrc/multilayer/cpu/). P is const T* (read) or T* (written).
template <typename P>
struct Pieces {
  c10::SmallVector<P, 8> base;
  int64_t width = 0, stride = 0;

  int64_t count() const { return static_cast<int64_t>(base.size()); }
  bool contiguous() const { return base.size() == 1 && stride == width; }
  // The same pieces from row r on.
  Pieces from_row(int64_t r) const {
    Pieces out = *this;
    for (P& x : out.base) x += r * stride;
    return out;
  }
};

// One piece of `width` values a row, rows `stride` apart (contiguous rows by default).
template <typename P>
Pieces<P> one_piece(P base, int64_t width, int64_t stride) {
  Pieces<P> out;
  out.base.push_back(base);
  out.width = width;
  out.stride = stride;
  return out;
}

template <typename P>
Pieces<P> one_piece(P base, int64_t width) {
  return one_piece(base, width, width);
}

// dst (count * width, ld): rows [0, rows) of every piece packed depth-major (pack_transposed), piece s into depth rows
// [s * width, (s + 1) * width).
template <typename T>
void pack_pieces(const Pieces<const T*>& src, int64_t rows, T* dst, int64_t ld) {
  for (int64_t s = 0; s < src.count(); ++s) {
    pack_transposed(src.base[s], rows, src.width, src.stride, dst + s * src.width * ld, ld);
  }
}

// acc (nx, count * width; row stride acc_stride) += W (nx, ny) @ [mat pieces] (ny, count * width), as
// accumulate_products (attention_tiles.h; `y_range(x)`: the y row x of W may be non-zero on) with piece s of mat feeding columns [s * width, (s + 1) * width) of acc.
template <typename T, typename YRange>
void accumulate_from_pieces(const T* weights, int64_t wx, int64_t wy, int64_t nx, YRange y_range,
                            const Pieces<const T*>& mat, T* acc, int64_t acc_stride) {
  for (int64_t s = 0; s < mat.count(); ++s) {
    accumulate_products<T>(weights, wx, wy, nx, y_range, mat.base[s], mat.stride, mat.width, acc + s * mat.width,
                           acc_stride);
  }
}

// [acc pieces] (nx, count * width) += W (nx, ny) @ mat (ny, count * width; row stride mat_stride): columns
// [s * width, (s + 1) * width) of the product into piece s.
template <typename T, typename YRange>
void accumulate_into_pieces(const T* weights, int64_t wx, int64_t wy, int64_t nx, YRange y_range, const T* mat,
                            int64_t mat_stride, const Pieces<T*>& acc) {
  for (int64_t s = 0; s < acc.count(); ++s) {
    accumulate_products<T>(weights, wx, wy, nx, y_range, mat + s * acc.width, mat_stride, acc.width, acc.base[s],
                           acc.stride);
  }
}

// Rows [0, rows) of the pieces = src (rows, count * width; row stride src_stride).
template <typename T>
void copy_to_pieces(const T* src, int64_t src_stride, int64_t rows, const Pieces<T*>& dst) {
  if (dst.contiguous() && src_stride == dst.width) {
    std::copy(src, src + rows * dst.width, dst.base[0]);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < dst.count(); ++s) {
      std::copy(src + r * src_stride + s * dst.width, src + r * src_stride + (s + 1) * dst.width,
                dst.base[s] + r * dst.stride);
    }
  }
}

// Rows [0, rows) of the pieces = src (rows, count * width; row stride src_stride) in non-temporal stores (stream_copy).
template <typename T>
void stream_to_pieces(const T* src, int64_t src_stride, int64_t rows, const Pieces<T*>& dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < dst.count(); ++s) {
      stream_copy(src + r * src_stride + s * dst.width, dst.width, dst.base[s] + r * dst.stride);
    }
  }
}

// Rows [0, rows) of the pieces = 0.
template <typename T>
void zero_pieces(const Pieces<T*>& dst, int64_t rows) {
  if (dst.contiguous()) {
    store_zeros(dst.base[0], rows * dst.width);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < dst.count(); ++s) store_zeros(dst.base[s] + r * dst.stride, dst.width);
  }
}

// One block of query rows [first_row, first_row + n_rows) of one (sentence, head): the forward pass. `q_block`
// (n_rows, D; row stride q_stride), `lse_block` (n_rows), `probs_block` (n_rows, S; null unless asked for) and the output pieces
// `out` (Dv values a row) start at the block's first row; `keys_t` holds the head's keys packed by pack_pieces, the
// value pieces `v` (Dv values a row) start at key 0.
template <typename T>
void forward_block(const AttentionParams& p, int64_t b, int64_t h, int64_t first_row, int64_t n_rows, int64_t n_keys,
                   const T* q_block, int64_t q_stride, const T* keys_t, int64_t ld, const Pieces<const T*>& v,
                   const Pieces<T*>& out,
                   T* lse_block, T* probs_block, ForwardScratch<T>& w) {
  const int64_t D = p.head_dim, Dv = p.value_dim;
  const BlockRanges ranges(p, p.head_kinds[h], first_row, n_rows, n_keys);
  OnlineSoftmax<T> state[kQueryBlock];
  T* scores = w.scores.data();
  T* acc = w.acc.data();
  store_zeros(acc, n_rows * Dv);
  for (int64_t j0 = round_down_to_vector<T>(ranges.all.begin); j0 < ranges.all.end; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, ranges.all.end - j0);
    // (n_rows, n) = q_block (n_rows, D) @ keys_t[:, j0:j0+n] (D, n)
    score_block_rows<T>(ranges, q_block, q_stride, D, keys_t, ld, j0, n, T(p.scale), scores);
    for (int64_t r = 0; r < n_rows; ++r) {
      const KeyRange cols = ranges.in_tile(r, j0, n);
      const bool nothing_yet = state[r].max == negative_infinity<T>();  // then the row of acc is still zero
      const T factor = forward_softmax_row(scores + r * kKeyTile, round_up_to_vector<T>(n), cols, state[r]);
      if (factor != T(1) && !nothing_yet) scale_row(acc + r * Dv, Dv, factor);
      if (p.dropout_p > 0 && !cols.empty()) apply_dropout(p, b, h, first_row + r, j0, cols, scores + r * kKeyTile);
    }
    // acc (n_rows, Dv) += weights (n_rows, n) @ v[j0:j0+n] (n, Dv)
    accumulate_from_pieces<T>(
        scores, kKeyTile, 1, n_rows, [&](int64_t r) { return ranges.in_tile(r, j0, n); },
        v.from_row(j0), acc, Dv);
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const T inverse_sum = state[r].inverse_sum();
    for (int64_t s = 0; s < out.count(); ++s) {
      scale_row_to(acc + r * Dv + s * out.width, out.width, inverse_sum, out.base[s] + r * out.stride);
    }
    lse_block[r] = state[r].log_sum_exp();
  }
  if (probs_block == nullptr) return;
  if (ranges.all.end - round_down_to_vector<T>(ranges.all.begin) <= kKeyTile && p.dropout_p == 0) {
    // One key tile: `scores` still holds exp(logit - max) of every visible key, max being the row's final one.
    const int64_t j0 = round_down_to_vector<T>(ranges.all.begin), n = ranges.all.end - j0;
    for (int64_t r = 0; r < n_rows; ++r) {
      const KeyRange cols = ranges.in_tile(r, j0, n);
      const T sum = state[r].sum;
      T* dst = probs_block + r * p.key_len + j0;
      for (int64_t c = cols.begin; c < cols.end; ++c) dst[c] = sum > T(0) ? scores[r * kKeyTile + c] / sum : T(0);
    }
  } else {
    write_block_probs(p, ranges, q_block, q_stride, keys_t, ld, state, probs_block, scores);
  }
}

// Scratch space of one backward task.
template <typename T>
struct BackwardScratch {
  std::vector<T> keys_t, values_t, weights, grad_scores, grad_q, delta;
  int64_t rows_ld;                // row length of the query rows packed depth-major for row_deltas
  std::vector<T> dout_t, out_t;   // (value_dim, rows_ld) each
  BackwardScratch(int64_t head_dim, int64_t value_dim, int64_t ld, int64_t query_len)
      : keys_t(head_dim * ld), values_t(value_dim * ld), weights(kBackwardBlock * kKeyTile),
        grad_scores(kBackwardBlock * kKeyTile), grad_q(kBackwardBlock * head_dim), delta(query_len),
        rows_ld(packed_row_length<T>(query_len)), dout_t(value_dim * rows_ld), out_t(value_dim * rows_ld) {}
};

// w.delta[i] = dO_i . O_i for the rows [0, n_rows) of one head, each summed as score_block sums one score dP_ij =
// dO_i . v_j: one multiply-add per element in the order of the depth, here with rows in the vector lanes (both sides
// packed depth-major by pack_pieces, so the pieces of a fused head are summed in the order score_block sums them).
// A row whose whole weight is on one key has O = v exactly, so dP - delta = 0 exactly: a one-key sentence's q and k
// gradients are then exactly 0, as plain PyTorch's are, instead of float32 residue summed over its queries.
template <typename T>
void row_deltas(const Pieces<const T*>& dout, const Pieces<const T*>& out, int64_t n_rows, BackwardScratch<T>& w) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  const int64_t depth = out.count() * out.width, ld = w.rows_ld;
  pack_pieces(dout, n_rows, w.dout_t.data(), ld);  // (depth, ld)
  pack_pieces(out, n_rows, w.out_t.data(), ld);    // (depth, ld)
  for (int64_t i = 0; i < n_rows; i += V) {
    Vec acc(T(0));
    for (int64_t d = 0; d < depth; ++d) {
      acc = at::vec::fmadd(Vec::loadu(w.dout_t.data() + d * ld + i), Vec::loadu(w.out_t.data() + d * ld + i), acc);
    }
    acc.store(w.delta.data() + i, static_cast<int>(std::min(V, n_rows - i)));
  }
}

// One row of a tile in the backward pass. In: logits `prob` (or, with `saved`, the forward's weights P) and dO . v
// `grad`. Out: the weights the output used (P z) and d(logit) * scale, both 0 outside `cols` over [0, width).
template <typename T>
void backward_softmax_row(const AttentionParams& p, int64_t b, int64_t h, int64_t row, int64_t j0, T* prob, T* grad,
                          int64_t width, KeyRange cols, T row_lse, T delta, T scale, bool saved) {
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
    const Vec pr = saved ? keep_lanes(Vec::loadu(prob + c), c, cols, T(0))
                         : exp_vec(keep_lanes(Vec::loadu(prob + c), c, cols, negative_infinity<T>()) - lse_v);
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

// Backward of one (sentence, head), all query rows. In: dO (T, Dv) and q (T, D), rows dout_stride and q_stride apart,
// lse and delta = rowsum(dO * O) (T; summed by row_deltas), the head's keys and values packed by pack_pieces into
// w.keys_t and w.values_t, and its key rows `k` (D values a row, for grad_q); `probs` (T, S), the forward's weights, or
// null to recompute them from q and k (as flash attention does; only then are w.keys_t read). With `probs`, no dropout
// and all keys in one tile, delta may be null: each row's delta is then rowsum(P * dP) over the tile (the same sum, as
// dP = dO v^T), so O need not be read.
// Out: the gradient pieces dq (T rows), dk and dv (S rows, padding keys' zero). The task owns its slices of grad_k and
// grad_v (zeroes them here, where they stay in cache for the accumulation, rather than in a separate pass over the
// whole tensors), so no two tasks collide.
template <typename T>
void backward_head(const AttentionParams& p, int64_t b, int64_t h, int64_t n_keys, const T* dout, int64_t dout_stride,
                   const T* q, int64_t q_stride, const T* lse, const T* delta, const T* probs, const Pieces<const T*>& k, const Pieces<T*>& dq,
                   const Pieces<T*>& dk, const Pieces<T*>& dv, BackwardScratch<T>& w) {
  const int64_t T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const int64_t ld = packed_row_length<T>(S);
  const T scale = T(p.scale);
  zero_pieces(dk, S);  // this task's slices of grad_k (S, D) and grad_v (S, Dv), padding keys included
  zero_pieces(dv, S);
  T* prob = w.weights.data();     // (kBackwardBlock, kKeyTile): logits in, dropped probabilities out
  T* grad = w.grad_scores.data();  // (kBackwardBlock, kKeyTile): dO . v in, d(logit) * scale out
  TORCH_INTERNAL_ASSERT(delta != nullptr || (probs != nullptr && p.dropout_p == 0 && S <= kKeyTile),
                        "backward_head: delta from the weights needs saved weights, no dropout and one key tile");
  for (int64_t first_row = 0; first_row < T_len; first_row += kBackwardBlock) {
    const int64_t n_rows = std::min(kBackwardBlock, T_len - first_row);
    const BlockRanges ranges(p, p.head_kinds[h], first_row, n_rows, n_keys);
    store_zeros(w.grad_q.data(), n_rows * D);
    for (int64_t j0 = round_down_to_vector<T>(ranges.all.begin); j0 < ranges.all.end; j0 += kKeyTile) {
      const int64_t n = std::min(kKeyTile, ranges.all.end - j0);
      if (probs != nullptr) {  // the visible weights of the tile's rows; backward_softmax_row masks the rest
        for (int64_t r = 0; r < n_rows; ++r) {
          const KeyRange cols = ranges.in_tile(r, j0, n);
          const T* src = probs + (first_row + r) * S + j0;
          std::copy(src + cols.begin, src + std::max(cols.begin, cols.end), prob + r * kKeyTile + cols.begin);
        }
      } else {
        score_block_rows<T>(ranges, q + first_row * q_stride, q_stride, D, w.keys_t.data(), ld, j0, n, scale, prob);
      }
      score_block_rows<T>(ranges, dout + first_row * dout_stride, dout_stride, Dv, w.values_t.data(), ld, j0, n, T(1),
                          grad);
      for (int64_t r = 0; r < n_rows; ++r) {
        const KeyRange cols = ranges.in_tile(r, j0, n);
        const T row_delta = delta != nullptr ? delta[first_row + r]
                            : cols.empty()   ? T(0)
                                             : dot(prob + r * kKeyTile + cols.begin, grad + r * kKeyTile + cols.begin,
                                                   cols.end - cols.begin);
        backward_softmax_row(p, b, h, first_row + r, j0, prob + r * kKeyTile, grad + r * kKeyTile,
                             round_up_to_vector<T>(n), cols, lse[first_row + r], row_delta, scale, probs != nullptr);
      }
      const auto rows_seeing = [&](int64_t x) { return ranges.rows_seeing(j0 + x, j0 + x + 1); };
      const auto keys_seen = [&](int64_t r) { return ranges.in_tile(r, j0, n); };
      // grad_v[j0:j0+n] (n, Dv) += P'^T (n, n_rows) @ dO_block (n_rows, Dv)
      accumulate_into_pieces<T>(prob, 1, kKeyTile, n, rows_seeing, dout + first_row * dout_stride, dout_stride,
                                dv.from_row(j0));
      // grad_k[j0:j0+n] (n, D) += dS^T (n, n_rows) @ q_block (n_rows, D)
      accumulate_into_pieces<T>(grad, 1, kKeyTile, n, rows_seeing, q + first_row * q_stride, q_stride,
                                dk.from_row(j0));
      // grad_q_block (n_rows, D) += dS (n_rows, n) @ k[j0:j0+n] (n, D)
      accumulate_from_pieces<T>(grad, kKeyTile, 1, n_rows, keys_seen, k.from_row(j0), w.grad_q.data(), D);
    }
    copy_to_pieces(w.grad_q.data(), D, n_rows, dq.from_row(first_row));
  }
}

}  // namespace
}  // namespace mma_nmt::attention::cpu::MMA_NMT_CPU_ISA
