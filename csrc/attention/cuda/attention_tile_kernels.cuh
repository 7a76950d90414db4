// Tiled CUDA kernels of mma_nmt::attention (issue 48, point 4): a block owns a tile of query rows (forward, dQ) or of
// keys (dK, dV), stages tiles of the other side in shared memory, and never builds a mask: each row's visible keys
// are one interval (head_mask.h), so a block visits only the key tiles its rows can see, and a key tile only the query
// rows that can see it (visible_queries).
//   - forward: one launch; online softmax over the key tiles, the same out and lse as the warp-per-row kernel;
//   - backward: two launches, dK/dV (a block per key tile, over the query rows that see it) and dQ (a block per query
//     tile), each writing its outputs once in the input dtype: no atomics, no accumulation buffers.
// Four threads share a row (or a key): each takes every fourth key of a tile for the logits, and every fourth element
// of the row's output (or gradient) for the products with the staged tiles. A block of w warps takes tiles of 8 w rows.
// Dropout is the warp kernels' hashed mask (keep_factor); weights (return_probs) stay with the warp-per-row kernels.
//
// The tile products (tile_dot and the accumulation loops) are plain multiply-adds, so the whole kernel, tiling,
// intervals, online softmax and accumulation included, runs under the HIP CPU emulator (tests/cpp/emulated). Every
// thread of a block runs the same loops and barriers (a row past the end computes with an empty interval), which the
// emulator's block-wide shuffles need.
#pragma once

#include "attention/cuda/warp_row.cuh"  // first: it includes common/cuda_compat.h

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Dispatch.h>

#include <tuple>

#include "attention/attention_outputs.h"
#include "common/key_lengths.h"
#include "common/online_softmax.h"

namespace mma_nmt::attention::cuda {

constexpr int kThreadsPerRow = 4;                                   // threads sharing one query row or one key
constexpr int kTileRowsPerWarp = kWarpSize / kThreadsPerRow;        // 8
constexpr int kMaxTile = kTileRowsPerWarp * kMaxWarpsPerBlock;      // 32 rows (or keys) a tile at most
constexpr int kMaxTileColumnsPerThread = kMaxTile / kThreadsPerRow;  // keys (or rows) of a tile per thread
constexpr int64_t kTileMaxHeadDim = 128;                            // q/k and v head sizes the tiles take

// Which kernels run a call: the tiled kernels where they serve it (no weights asked for, head sizes up to 128, tiles
// within the shared memory a launch gets), else the warp-per-row kernels; the emulated tests force each.
enum class AttentionKernelSet { kAuto, kRowWarps, kTiles };

// Which of the three tiled kernels a shared-memory layout is for.
enum class TilePass { kForward, kKeyGrads, kQueryGrads };

// Shared memory of a block: staged rows in the input dtype (q and k rows with stride staged_stride(D), v and dout rows
// with staged_stride(Dv)), then acc_t buffers (per row or key of the block, a row of tile + 1 values: forward weights,
// backward probabilities and logit gradients; in the dK/dV pass also the staged rows' lse and delta), then each
// staged row's visible key interval. Offsets are in elements of their region.
template <typename scalar_t, typename acc_t>
struct TileLayout {
  int64_t tile, key_stride, value_stride;
  int64_t q, k, v, dout;              // scalar_t region
  int64_t first, second, lse, delta;  // acc_t region, from acc_bytes
  int64_t acc_bytes, range_bytes, bytes;

  MMA_HOST_DEVICE TileLayout(int64_t tile_rows, int64_t head_dim, int64_t value_dim, TilePass pass)
      : tile(tile_rows),
        key_stride(gpu::staged_stride<scalar_t>(head_dim)),
        value_stride(gpu::staged_stride<scalar_t>(value_dim)) {
    const bool backward = pass != TilePass::kForward;
    q = 0;
    k = q + tile * key_stride;
    v = k + tile * key_stride;
    dout = v + tile * value_stride;
    const int64_t scalars = dout + (backward ? tile * value_stride : 0);
    acc_bytes = (scalars * static_cast<int64_t>(sizeof(scalar_t)) + 15) / 16 * 16;
    const int64_t row = tile + 1;  // one spare column: the 4 threads of a row write 4 banks apart
    first = 0;
    second = first + tile * row;
    lse = second + (pass == TilePass::kKeyGrads ? tile * row : 0);
    delta = lse + (pass == TilePass::kKeyGrads ? tile : 0);
    const int64_t accs = delta + (pass == TilePass::kKeyGrads ? tile : 0);
    range_bytes = acc_bytes + (accs * static_cast<int64_t>(sizeof(acc_t)) + 15) / 16 * 16;
    bytes = range_bytes + 2 * tile * static_cast<int64_t>(sizeof(int64_t));
  }
};

// The block's views of its shared memory.
template <typename scalar_t, typename acc_t>
struct TileViews {
  scalar_t *q, *k, *v, *dout;
  acc_t *first, *second, *lse, *delta;
  int64_t *begin, *end;  // visible keys of each staged row
};

template <typename scalar_t, typename acc_t>
__device__ TileViews<scalar_t, acc_t> tile_views(unsigned char* shared, const TileLayout<scalar_t, acc_t>& l) {
  scalar_t* scalars = reinterpret_cast<scalar_t*>(shared);
  acc_t* accs = reinterpret_cast<acc_t*>(shared + l.acc_bytes);
  int64_t* ranges = reinterpret_cast<int64_t*>(shared + l.range_bytes);
  return {scalars + l.q, scalars + l.k,  scalars + l.v,   scalars + l.dout, accs + l.first,
          accs + l.second, accs + l.lse, accs + l.delta, ranges,         ranges + l.tile};
}

// Copies rows first .. first + tile - 1 of one head's (rows, dim) matrix (row i at matrix + i * row_stride, its
// elements contiguous) into a staged tile, zeros from row `limit` on: each warp takes every warps-th row, its lanes
// consecutive elements (coalesced, no index division). All threads of the block take part; the caller waits with
// __syncthreads.
template <typename scalar_t>
__device__ void stage_rows(scalar_t* tile_rows, int64_t stride, const scalar_t* matrix, int64_t row_stride,
                           int64_t first, int64_t limit, int64_t tile, int64_t dim) {
  const int warps = blockDim.x / kWarpSize, warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int64_t r = warp; r < tile; r += warps) {
    const bool real = first + r < limit;
    const scalar_t* source = matrix + (first + r) * row_stride;
    for (int d = lane; d < dim; d += kWarpSize) tile_rows[r * stride + d] = real ? source[d] : scalar_t(0);
  }
}

// The visible keys of query rows first .. first + tile - 1 of head h (empty past the last row); the caller waits.
__device__ inline void stage_row_ranges(const KernelParams& p, int64_t h, int64_t first, int64_t tile, int64_t n_keys,
                                        int64_t* begin, int64_t* end) {
  for (int64_t r = threadIdx.x; r < tile; r += blockDim.x) {
    const int64_t i = first + r;
    const KeyRange keys = i < p.query_len ? visible_keys(p.head_kinds[h], i + p.query_offset, p.window, n_keys)
                                          : KeyRange{0, 0};
    begin[r] = keys.begin;
    end[r] = keys.end;
  }
}

// The smallest interval holding every staged row's non-empty interval (empty when none has keys).
__device__ inline KeyRange tile_hull(const int64_t* begin, const int64_t* end, int64_t tile) {
  KeyRange hull{0, 0};
  bool any = false;
  for (int64_t r = 0; r < tile; ++r) {
    if (begin[r] >= end[r]) continue;
    hull.begin = any ? min_of(hull.begin, begin[r]) : begin[r];
    hull.end = any ? max_of(hull.end, end[r]) : end[r];
    any = true;
  }
  return hull;
}

// Dot product of two staged rows of `dim` values, summed in order.
template <typename acc_t, typename scalar_t>
__device__ __forceinline__ acc_t tile_dot(const scalar_t* a, const scalar_t* b, int dim) {
  acc_t sum = 0;
  for (int d = 0; d < dim; ++d) sum += static_cast<acc_t>(a[d]) * static_cast<acc_t>(b[d]);
  return sum;
}

// Sum and maximum over the 4 threads of a row (adjacent lanes), returned to each of them.
template <typename acc_t>
__device__ __forceinline__ acc_t row_group_sum(acc_t x) {
  for (int offset = 1; offset < kThreadsPerRow; offset *= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <typename acc_t>
__device__ __forceinline__ acc_t row_group_max(acc_t x) {
  for (int offset = 1; offset < kThreadsPerRow; offset *= 2) {
    const acc_t other = __shfl_xor_sync(0xffffffffu, x, offset);
    x = other > x ? other : x;
  }
  return x;
}

// delta_i = dO_i . O_i, summed in the order tile_dot sums dP_ij = dO_i . v_j, so that a row whose weight is all on one
// key (O_i = v_j, as the forward writes it) gets dP_ij - delta_i = 0 exactly, as plain PyTorch's softmax backward
// does: a one-key sentence's key then gets an exactly zero gradient instead of float rounding residue summed over
// every query that sees it (issue 48, point 6). 0 for a row past the end.
template <typename acc_t, typename scalar_t>
__device__ __forceinline__ acc_t row_delta(const scalar_t* grad_out, const scalar_t* out, bool valid, int dim) {
  return valid ? tile_dot<acc_t>(grad_out, out, dim) : acc_t(0);
}

// What the tiled forward kernel reads and writes: head tensors through their strides (common/head_rows.h).
template <typename scalar_t>
struct TileForwardPointers {
  using acc_t = at::opmath_type<scalar_t>;
  gpu::HeadRows<const scalar_t> q;  // (B, H, T, D)
  gpu::HeadRows<const scalar_t> k;  // (B, H, S, D)
  gpu::HeadRows<const scalar_t> v;  // (B, H, S, Dv)
  gpu::HeadRows<scalar_t> out;      // (B, H, T, Dv)
  acc_t* lse;                       // (B, H, T) contiguous
};

// What the backward kernels read and write, head tensors through their strides. The tiled kernels write each gradient
// once, in the input dtype (grad_kv_t = scalar_t); the warp-per-row kernel adds dK and dV into accumulators of the
// accumulation type (attention_backward_kernel.cuh).
template <typename scalar_t, typename grad_kv_t = scalar_t>
struct BackwardPointers {
  using acc_t = at::opmath_type<scalar_t>;
  gpu::HeadRows<const scalar_t> grad_out;  // (B, H, T, Dv)
  gpu::HeadRows<const scalar_t> q;         // (B, H, T, D)
  gpu::HeadRows<const scalar_t> k;         // (B, H, S, D)
  gpu::HeadRows<const scalar_t> v;         // (B, H, S, Dv)
  gpu::HeadRows<const scalar_t> out;       // (B, H, T, Dv)
  const acc_t* lse;                        // (B, H, T) contiguous
  gpu::HeadRows<scalar_t> grad_q;          // (B, H, T, D)
  gpu::HeadRows<grad_kv_t> grad_k;         // (B, H, S, D)
  gpu::HeadRows<grad_kv_t> grad_v;         // (B, H, S, Dv)
};

template <typename scalar_t, typename grad_kv_t = scalar_t>
BackwardPointers<scalar_t, grad_kv_t> backward_pointers(const BackwardTensors& t) {
  return {gpu::head_rows<const scalar_t>(t.grad_out), gpu::head_rows<const scalar_t>(t.q),
          gpu::head_rows<const scalar_t>(t.k),        gpu::head_rows<const scalar_t>(t.v),
          gpu::head_rows<const scalar_t>(t.out),      t.lse.data_ptr<at::opmath_type<scalar_t>>(),
          gpu::head_rows<scalar_t>(t.grad_q),         gpu::head_rows<grad_kv_t>(t.grad_k_acc),
          gpu::head_rows<grad_kv_t>(t.grad_v_acc)};
}

// Where a thread of a tiled kernel sits: its block's tile size, sentence, head (bh: both, as an index of (B, H)) and
// first row (or key), and the thread's row (or key) r within the tile and its column c among the row's 4 threads.
struct TileThread {
  int64_t tile, b, h, bh, first;
  int r, c;
};

__device__ inline TileThread tile_thread(const KernelParams& p) {
  const int64_t tile = blockDim.x / kThreadsPerRow, b = blockIdx.z, h = blockIdx.y;
  return {tile, b, h, b * p.heads + h, static_cast<int64_t>(blockIdx.x) * tile,
          static_cast<int>(threadIdx.x / kThreadsPerRow), static_cast<int>(threadIdx.x % kThreadsPerRow)};
}

// Stages a query tile's rows of q and their visible keys (the forward and dQ kernels; the caller waits).
template <typename scalar_t, typename acc_t>
__device__ void stage_query_tile(const KernelParams& p, const TileThread& w, const TileLayout<scalar_t, acc_t>& layout,
                                 const TileViews<scalar_t, acc_t>& s, const gpu::HeadRows<const scalar_t>& q) {
  stage_row_ranges(p, w.h, w.first, w.tile, keys_of_sentence(p.key_lengths, w.b, p.key_len), s.begin, s.end);
  stage_rows(s.q, layout.key_stride, q.head(w.b, w.h), q.row_stride, w.first, p.query_len, w.tile, p.head_dim);
}

// Forward: block (query tile, head, sentence). kSlots: output elements per thread, kSlots * 4 >= value_dim.
template <typename scalar_t, int kSlots>
__global__ void __launch_bounds__(kMaxWarpsPerBlock* kWarpSize)
    attention_tile_forward_kernel(const KernelParams p, const TileForwardPointers<scalar_t> t) {
  using acc_t = at::opmath_type<scalar_t>;
  const TileThread w = tile_thread(p);
  const auto [tile, b, h, bh, first, r, c] = w;
  const TileLayout<scalar_t, acc_t> layout(tile, p.head_dim, p.value_dim, TilePass::kForward);
  MMA_NMT_DYNAMIC_SHARED(unsigned char, shared);
  const TileViews<scalar_t, acc_t> s = tile_views(shared, layout);
  const int D = static_cast<int>(p.head_dim), Dv = static_cast<int>(p.value_dim);  // at most kTileMaxHeadDim
  const int64_t T = p.query_len;
  const int64_t i = first + r, row = bh * T + i;  // row: the index of (b, h, i) in (B, H, T) tensors (lse, dropout)
  const bool row_valid = i < T;

  stage_query_tile(p, w, layout, s, t.q);
  __syncthreads();
  const KeyRange hull = tile_hull(s.begin, s.end, tile);
  const KeyRange mine{s.begin[r], s.end[r]};
  const scalar_t* query = s.q + r * layout.key_stride;
  acc_t* weights = s.first + r * (tile + 1);
  const acc_t scale = static_cast<acc_t>(p.scale);

  acc_t acc[kSlots];
#pragma unroll
  for (int e = 0; e < kSlots; ++e) acc[e] = 0;
  OnlineSoftmax<acc_t> state;
  for (int64_t j0 = hull.begin; j0 < hull.end; j0 += tile) {
    const int keys = static_cast<int>(min_of(tile, hull.end - j0));
    __syncthreads();  // every thread is done with the previous tile's keys, values and weights
    stage_rows(s.k, layout.key_stride, t.k.head(b, h), t.k.row_stride, j0, hull.end, tile, D);
    stage_rows(s.v, layout.value_stride, t.v.head(b, h), t.v.row_stride, j0, hull.end, tile, Dv);
    __syncthreads();
    acc_t logits[kMaxTileColumnsPerThread];
    acc_t tile_max = negative_infinity<acc_t>();
#pragma unroll
    for (int m = 0; m < kMaxTileColumnsPerThread; ++m) {
      const int64_t jj = c + m * kThreadsPerRow, j = j0 + jj;
      logits[m] = negative_infinity<acc_t>();
      if (jj < keys && j >= mine.begin && j < mine.end) {
        logits[m] = tile_dot<acc_t>(query, s.k + jj * layout.key_stride, D) * scale;
        tile_max = logits[m] > tile_max ? logits[m] : tile_max;
      }
    }
    const acc_t rescale = state.raise_max(row_group_max(tile_max));
    acc_t part = 0;
#pragma unroll
    for (int m = 0; m < kMaxTileColumnsPerThread; ++m) {
      const int64_t jj = c + m * kThreadsPerRow;
      if (jj >= tile) continue;
      acc_t weight = 0;
      if (logits[m] != negative_infinity<acc_t>()) {
        weight = state.weight(logits[m]);
        part += weight;  // the softmax sum runs over undropped weights; dropout only thins the output
        weight *= keep_factor<acc_t>(p, row, j0 + jj);
      }
      weights[jj] = weight;
    }
    state.add(row_group_sum(part));
    gpu::warp_sync();  // the row's weights, written by its 4 threads, are read by each of them
#pragma unroll
    for (int e = 0; e < kSlots; ++e) {
      const int64_t d = c + e * kThreadsPerRow;
      if (d >= Dv) continue;
      acc_t sum = 0;
      for (int jj = 0; jj < keys; ++jj) sum += weights[jj] * static_cast<acc_t>(s.v[jj * layout.value_stride + d]);
      acc[e] = acc[e] * rescale + sum;
    }
  }
  if (!row_valid) return;  // after the last barrier
  // A row without visible keys has inverse_sum 0 and lse -inf: zero output, never NaN.
  const acc_t inverse_sum = state.inverse_sum();
#pragma unroll
  for (int e = 0; e < kSlots; ++e) {
    const int64_t d = c + e * kThreadsPerRow;
    if (d < Dv) t.out.row(b, h, i)[d] = static_cast<scalar_t>(acc[e] * inverse_sum);
  }
  if (c == 0) t.lse[row] = state.log_sum_exp();
}

// dK, dV: block (key tile, head, sentence) over the query rows that see its keys, in tiles. Thread (key jj, c) forms
// P and dS of its key for every fourth staged row, then adds its elements c, c + 4, ... of dK_j and dV_j.
template <typename scalar_t, int kSlots>
__global__ void __launch_bounds__(kMaxWarpsPerBlock* kWarpSize)
    attention_tile_key_grads_kernel(const KernelParams p, const BackwardPointers<scalar_t> t) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto [tile, b, h, bh, first_key, jj, c] = tile_thread(p);  // jj: this thread's key within the tile
  const TileLayout<scalar_t, acc_t> layout(tile, p.head_dim, p.value_dim, TilePass::kKeyGrads);
  MMA_NMT_DYNAMIC_SHARED(unsigned char, shared);
  const TileViews<scalar_t, acc_t> s = tile_views(shared, layout);
  const int D = static_cast<int>(p.head_dim), Dv = static_cast<int>(p.value_dim);  // at most kTileMaxHeadDim
  const int64_t S = p.key_len, T = p.query_len;
  const int64_t j = first_key + jj;
  const int64_t n_keys = keys_of_sentence(p.key_lengths, b, S);
  const KeyRange rows = visible_queries(p.head_kinds[h], first_key, first_key + tile, p.window, p.query_offset, T,
                                        n_keys);
  stage_rows(s.k, layout.key_stride, t.k.head(b, h), t.k.row_stride, first_key, S, tile, D);
  stage_rows(s.v, layout.value_stride, t.v.head(b, h), t.v.row_stride, first_key, S, tile, Dv);
  const scalar_t* key = s.k + jj * layout.key_stride;
  const scalar_t* value = s.v + jj * layout.value_stride;
  acc_t* probs = s.first + jj * (tile + 1);  // this key's P_ij z_ij, by staged row
  acc_t* grads = s.second + jj * (tile + 1);  // this key's dS_ij times the scale, by staged row
  const acc_t scale = static_cast<acc_t>(p.scale);

  acc_t grad_k[kSlots], grad_v[kSlots];
#pragma unroll
  for (int e = 0; e < kSlots; ++e) grad_k[e] = grad_v[e] = 0;
  for (int64_t i0 = rows.begin; i0 < rows.end; i0 += tile) {
    const int n_rows = static_cast<int>(min_of(tile, rows.end - i0));
    __syncthreads();  // every thread is done with the previous row tile
    stage_rows(s.q, layout.key_stride, t.q.head(b, h), t.q.row_stride, i0, rows.end, tile, D);
    stage_rows(s.dout, layout.value_stride, t.grad_out.head(b, h), t.grad_out.row_stride, i0, rows.end, tile, Dv);
    stage_row_ranges(p, h, i0, tile, n_keys, s.begin, s.end);
    if (c == 0) {  // the staged rows' lse and delta: thread (staged row jj, 0), as a tile has as many rows as keys
      const int64_t i = i0 + jj;
      const bool valid = i < rows.end;
      s.lse[jj] = valid ? t.lse[bh * T + i] : negative_infinity<acc_t>();
      s.delta[jj] = row_delta<acc_t>(t.grad_out.row(b, h, i), t.out.row(b, h, i), valid, Dv);
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kMaxTileColumnsPerThread; ++m) {
      const int64_t rr = c + m * kThreadsPerRow;
      if (rr >= tile) continue;
      acc_t prob = 0, grad = 0;
      const acc_t lse = s.lse[rr];
      if (rr < n_rows && j >= s.begin[rr] && j < s.end[rr] && lse != negative_infinity<acc_t>()) {
        prob = probability_from_lse(tile_dot<acc_t>(s.q + rr * layout.key_stride, key, D) * scale, lse);
        const acc_t grad_prob = tile_dot<acc_t>(s.dout + rr * layout.value_stride, value, Dv);  // dO_i . v_j
        const acc_t keep = keep_factor<acc_t>(p, bh * T + i0 + rr, j);
        grad = prob * (grad_prob * keep - s.delta[rr]) * scale;
        prob *= keep;
      }
      probs[rr] = prob;
      grads[rr] = grad;
    }
    gpu::warp_sync();  // the key's column, written by its 4 threads, is read by each of them
#pragma unroll
    for (int e = 0; e < kSlots; ++e) {
      const int64_t d = c + e * kThreadsPerRow;
      acc_t sum_k = 0, sum_v = 0;
      for (int rr = 0; rr < n_rows; ++rr) {
        if (d < D) sum_k += grads[rr] * static_cast<acc_t>(s.q[rr * layout.key_stride + d]);
        if (d < Dv) sum_v += probs[rr] * static_cast<acc_t>(s.dout[rr * layout.value_stride + d]);
      }
      grad_k[e] += sum_k;
      grad_v[e] += sum_v;
    }
  }
  if (j >= S) return;  // after the last barrier
#pragma unroll
  for (int e = 0; e < kSlots; ++e) {
    const int64_t d = c + e * kThreadsPerRow;
    if (d < D) t.grad_k.row(b, h, j)[d] = static_cast<scalar_t>(grad_k[e]);
    if (d < Dv) t.grad_v.row(b, h, j)[d] = static_cast<scalar_t>(grad_v[e]);
  }
}

// dQ: block (query tile, head, sentence) over its rows' key tiles, as the forward kernel.
template <typename scalar_t, int kSlots>
__global__ void __launch_bounds__(kMaxWarpsPerBlock* kWarpSize)
    attention_tile_query_grads_kernel(const KernelParams p, const BackwardPointers<scalar_t> t) {
  using acc_t = at::opmath_type<scalar_t>;
  const TileThread w = tile_thread(p);
  const auto [tile, b, h, bh, first, r, c] = w;
  const TileLayout<scalar_t, acc_t> layout(tile, p.head_dim, p.value_dim, TilePass::kQueryGrads);
  MMA_NMT_DYNAMIC_SHARED(unsigned char, shared);
  const TileViews<scalar_t, acc_t> s = tile_views(shared, layout);
  const int D = static_cast<int>(p.head_dim), Dv = static_cast<int>(p.value_dim);  // at most kTileMaxHeadDim
  const int64_t T = p.query_len;
  const int64_t i = first + r, row = bh * T + i;  // row: the index of (b, h, i) in (B, H, T) tensors (lse, dropout)
  const bool row_valid = i < T;

  stage_query_tile(p, w, layout, s, t.q);
  stage_rows(s.dout, layout.value_stride, t.grad_out.head(b, h), t.grad_out.row_stride, first, T, tile, Dv);
  const acc_t delta = row_delta<acc_t>(t.grad_out.row(b, h, i), t.out.row(b, h, i), row_valid, Dv);
  const acc_t lse = row_valid ? t.lse[row] : negative_infinity<acc_t>();
  __syncthreads();
  const KeyRange hull = tile_hull(s.begin, s.end, tile);
  const KeyRange mine{s.begin[r], s.end[r]};
  const scalar_t* query = s.q + r * layout.key_stride;
  const scalar_t* grad_out = s.dout + r * layout.value_stride;
  acc_t* grads = s.first + r * (tile + 1);  // this row's dS_ij times the scale, by staged key
  const acc_t scale = static_cast<acc_t>(p.scale);

  acc_t grad_q[kSlots];
#pragma unroll
  for (int e = 0; e < kSlots; ++e) grad_q[e] = 0;
  for (int64_t j0 = hull.begin; j0 < hull.end; j0 += tile) {
    const int keys = static_cast<int>(min_of(tile, hull.end - j0));
    __syncthreads();
    stage_rows(s.k, layout.key_stride, t.k.head(b, h), t.k.row_stride, j0, hull.end, tile, D);
    stage_rows(s.v, layout.value_stride, t.v.head(b, h), t.v.row_stride, j0, hull.end, tile, Dv);
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kMaxTileColumnsPerThread; ++m) {
      const int64_t jj = c + m * kThreadsPerRow, j = j0 + jj;
      if (jj >= tile) continue;
      acc_t grad = 0;
      if (jj < keys && j >= mine.begin && j < mine.end && lse != negative_infinity<acc_t>()) {
        const acc_t prob =
            probability_from_lse(tile_dot<acc_t>(query, s.k + jj * layout.key_stride, D) * scale, lse);
        const acc_t grad_prob = tile_dot<acc_t>(grad_out, s.v + jj * layout.value_stride, Dv);
        grad = prob * (grad_prob * keep_factor<acc_t>(p, row, j) - delta) * scale;
      }
      grads[jj] = grad;
    }
    gpu::warp_sync();
#pragma unroll
    for (int e = 0; e < kSlots; ++e) {
      const int64_t d = c + e * kThreadsPerRow;
      if (d >= D) continue;
      acc_t sum = 0;
      for (int jj = 0; jj < keys; ++jj) sum += grads[jj] * static_cast<acc_t>(s.k[jj * layout.key_stride + d]);
      grad_q[e] += sum;
    }
  }
  if (!row_valid) return;
#pragma unroll
  for (int e = 0; e < kSlots; ++e) {
    const int64_t d = c + e * kThreadsPerRow;
    if (d < D) t.grad_q.row(b, h, i)[d] = static_cast<scalar_t>(grad_q[e]);
  }
}

// --- launches --------------------------------------------------------------------------------------------------------

// Warps per block of the tiled kernels for this call: the most, up to launch.warps_per_block, whose tiles fit in
// kBlockSharedLimit for every pass; 0 where the tiles cannot serve it (head sizes past kTileMaxHeadDim).
template <typename scalar_t>
int tile_warps(const AttentionParams& p, const gpu::Launch& launch, bool backward) {
  using acc_t = at::opmath_type<scalar_t>;
  if (p.head_dim > kTileMaxHeadDim || p.value_dim > kTileMaxHeadDim) return 0;
  for (int warps = launch.warps_per_block; warps >= 1; --warps) {
    const int64_t tile = static_cast<int64_t>(warps) * kTileRowsPerWarp;
    int64_t bytes = TileLayout<scalar_t, acc_t>(tile, p.head_dim, p.value_dim, TilePass::kForward).bytes;
    if (backward) {
      bytes = TileLayout<scalar_t, acc_t>(tile, p.head_dim, p.value_dim, TilePass::kKeyGrads).bytes;
      bytes = max_of(bytes, TileLayout<scalar_t, acc_t>(tile, p.head_dim, p.value_dim, TilePass::kQueryGrads).bytes);
    }
    if (bytes <= gpu::kBlockSharedLimit) return warps;
  }
  return 0;
}

// Keys per sentence up to which kAuto runs the backward on the warp-per-row kernel. On an H200 in bfloat16 (H 8,
// D 64, 4k-8k tokens; benchmarks/results/2026-11-29.nmt-sizes.notes.md) it beat the tiled backward at S = 32, 64 and
// 128 for mixed, causal and padded global heads (by 1.1-2.5x) and lost by 10 % for unpadded global heads at
// S = 128; from S = 512 the tiled backward led by 1.1-1.3x for global and mixed heads.
constexpr int64_t kRowBackwardMaxKeys = 128;

// The warps of the tiled kernels for this call under `kernels` (0: the warp-per-row kernels run); refuses kTiles
// where the tiles cannot serve the call. kAuto leaves calls of fewer query rows than a warp's tile rows (an incremental
// decoding step has one) to the warp kernels, which give a row a whole warp instead of 4 threads of a mostly empty
// tile, and backward calls of up to kRowBackwardMaxKeys keys; but under torch.use_deterministic_algorithms(True) it
// gives every backward call of several query rows the tiles can serve to the tiles, which write each gradient once,
// where the warp kernel adds dK and dV atomically in an order that changes from run to run (run_attention_backward
// alerts where the tiles cannot serve). One query row adds once to each key, onto zero: the same result every run.
// The forward kernels add nothing atomically, so the forward choice ignores that mode.
template <typename scalar_t>
int tile_warps_for(const AttentionParams& p, const gpu::Launch& launch, bool backward, bool return_probs,
                   AttentionKernelSet kernels) {
  if (kernels == AttentionKernelSet::kRowWarps) return 0;
  const bool deterministic_backward = backward && p.query_len > 1 && at::globalContext().deterministicAlgorithms();
  if (kernels == AttentionKernelSet::kAuto && !deterministic_backward) {
    if (p.query_len < kTileRowsPerWarp) return 0;
    if (backward && p.key_len <= kRowBackwardMaxKeys) return 0;
  }
  const int warps = return_probs ? 0 : tile_warps<scalar_t>(p, launch, backward);
  TORCH_CHECK(kernels != AttentionKernelSet::kTiles || warps > 0, "mma_nmt attention: the tiled kernels take head ",
              "sizes up to ", kTileMaxHeadDim, " without weights, got head_dim=", p.head_dim, ", value_dim=",
              p.value_dim, return_probs ? " with weights asked for" : "");
  return warps;
}

template <typename F>
void with_tile_slots(const AttentionParams& p, F&& f) {
  if (max_of(p.head_dim, p.value_dim) <= kTileMaxHeadDim / 2) {
    f(std::integral_constant<int, kTileMaxHeadDim / 2 / kThreadsPerRow>{});
  } else {
    f(std::integral_constant<int, kTileMaxHeadDim / kThreadsPerRow>{});
  }
}

// Grid: x the tiles of `len` rows (or keys), y the heads, z the sentences.
inline dim3 tile_grid(const AttentionParams& p, int64_t len, int warps) {
  const int64_t tile = static_cast<int64_t>(warps) * kTileRowsPerWarp;
  return dim3(static_cast<unsigned>((len + tile - 1) / tile), static_cast<unsigned>(p.heads),
              static_cast<unsigned>(p.batch));
}

template <typename scalar_t>
void launch_tile_forward(const AttentionParams& p, const ForwardTensors& t, int warps, const gpu::Launch& launch) {
  using acc_t = at::opmath_type<scalar_t>;
  const TileForwardPointers<scalar_t> ptrs{gpu::head_rows<const scalar_t>(t.q), gpu::head_rows<const scalar_t>(t.k),
                                           gpu::head_rows<const scalar_t>(t.v), gpu::head_rows<scalar_t>(t.out),
                                           t.lse.data_ptr<acc_t>()};
  const int64_t tile = static_cast<int64_t>(warps) * kTileRowsPerWarp;
  const int64_t bytes = TileLayout<scalar_t, acc_t>(tile, p.head_dim, p.value_dim, TilePass::kForward).bytes;
  with_tile_slots(p, [&](auto slots) {
    gpu::launch_kernel(&attention_tile_forward_kernel<scalar_t, decltype(slots)::value>,
                       tile_grid(p, p.query_len, warps), dim3(warps * kWarpSize), static_cast<size_t>(bytes), launch,
                       make_kernel_params(p, t.key_lengths), ptrs);
  });
}

// grad_q, grad_k and grad_v (input dtype, every element written) from the two tiled backward kernels.
template <typename scalar_t>
void launch_tile_backward(const AttentionParams& p, const BackwardTensors& t, int warps, const gpu::Launch& launch) {
  using acc_t = at::opmath_type<scalar_t>;
  const BackwardPointers<scalar_t> ptrs = backward_pointers<scalar_t>(t);
  const int64_t tile = static_cast<int64_t>(warps) * kTileRowsPerWarp;
  const KernelParams params = make_kernel_params(p, t.key_lengths);
  const dim3 block(warps * kWarpSize);
  with_tile_slots(p, [&](auto slots) {
    constexpr int kSlots = decltype(slots)::value;
    const int64_t key_bytes = TileLayout<scalar_t, acc_t>(tile, p.head_dim, p.value_dim, TilePass::kKeyGrads).bytes;
    gpu::launch_kernel(&attention_tile_key_grads_kernel<scalar_t, kSlots>, tile_grid(p, p.key_len, warps), block,
                       static_cast<size_t>(key_bytes), launch, params, ptrs);
    const int64_t query_bytes =
        TileLayout<scalar_t, acc_t>(tile, p.head_dim, p.value_dim, TilePass::kQueryGrads).bytes;
    gpu::launch_kernel(&attention_tile_query_grads_kernel<scalar_t, kSlots>, tile_grid(p, p.query_len, warps), block,
                       static_cast<size_t>(query_bytes), launch, params, ptrs);
  });
}

}  // namespace mma_nmt::attention::cuda
