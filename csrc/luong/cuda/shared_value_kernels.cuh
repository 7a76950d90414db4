// CUDA kernels of mma_nmt::shared_value_attention and its backward, and their launches for checked arguments.
// Forward runs one block per query row (threads over keys for the scores, then over value columns). Backward runs two
// passes, no atomics and no accumulation buffers: a warp per (query row, key) forms the probabilities and the logit
// gradients into (B, H, T, S) scratch, then a thread per gradient column and sentence sums the products over the keys,
// heads and rows and writes each gradient element once, in the input dtype. (Until 2026-11-29 one block per sentence
// did all of it: 2.0-3.1 ms on an H200 at the Luong step's B 128, H 4, S 30-50, d 1024, for B blocks whose threads
// each read whole key rows; benchmarks/results/2026-11-29.nmt-sizes.notes.md.) Accumulates in float (double for
// double); float32, float16, bfloat16 and float64 inputs.
//
// Device source and device-agnostic launch code: compiled by nvcc (luong_cuda.cu) and under the HIP CPU emulator
// (tests/cpp/emulated). Every thread of a block passes the same __syncthreads, as the emulator requires.
#pragma once

#include "common/cuda_compat.h"  // first: under the emulator torch's headers must precede HIP's

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>

#include "common/key_lengths.h"
#include "common/online_softmax.h"
#include "common/warp.cuh"
#include "luong/shared_value_params.h"

namespace mma_nmt::luong::cuda {


constexpr int kThreads = 128;

template <typename scalar_t, typename acc_t>
__device__ acc_t dot_of(const scalar_t* a, const scalar_t* b, int64_t n) {
  acc_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<acc_t>(a[i]) * static_cast<acc_t>(b[i]);
  return sum;
}

template <typename scalar_t, typename acc_t>
__global__ void forward_kernel(SharedValueParams p, const int64_t* lengths, const scalar_t* __restrict__ q,
                               const scalar_t* __restrict__ k, const scalar_t* __restrict__ v,
                               scalar_t* __restrict__ out, acc_t* __restrict__ lse, scalar_t* __restrict__ probs) {
  MMA_NMT_DYNAMIC_SHARED(acc_t, scores);  // (n_keys,)
  __shared__ acc_t row_lse;
  const int64_t row = blockIdx.x;  // (b * H + h) * T + t
  const int64_t bh = row / p.query_len, b = bh / p.heads;
  const int64_t n_keys = keys_of_sentence(lengths, b, p.key_len);
  const scalar_t* q_row = q + row * p.head_dim;
  for (int64_t s = threadIdx.x; s < n_keys; s += blockDim.x) {
    scores[s] = acc_t(p.scale) * dot_of<scalar_t, acc_t>(q_row, k + (bh * p.key_len + s) * p.head_dim, p.head_dim);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    OnlineSoftmax<acc_t> state;
    for (int64_t s = 0; s < n_keys; ++s) state.raise_max(scores[s]);
    for (int64_t s = 0; s < n_keys; ++s) state.add(state.weight(scores[s]));
    row_lse = state.log_sum_exp();
    lse[row] = row_lse;
  }
  __syncthreads();
  for (int64_t s = threadIdx.x; s < n_keys; s += blockDim.x) {
    scores[s] = probability_from_lse(scores[s], row_lse);
    if (probs != nullptr) probs[row * p.key_len + s] = static_cast<scalar_t>(scores[s]);
  }
  __syncthreads();
  const scalar_t* values = v + b * p.key_len * p.value_dim;
  for (int64_t c = threadIdx.x; c < p.value_dim; c += blockDim.x) {
    acc_t acc = 0;
    for (int64_t s = 0; s < n_keys; ++s) acc += scores[s] * static_cast<acc_t>(values[s * p.value_dim + c]);
    out[row * p.value_dim + c] = static_cast<scalar_t>(acc);
  }
}

// Backward, first pass: for query row (b, h, t) = blockIdx.x and each key s, the probability P_s and the logit
// gradient scale * P_s (dO . v_s - delta), delta = dO . O, into (B, H, T, S) scratch; 0 at padding keys and in rows
// without a key. Warp w of the block takes keys w, w + warps, ...; its lanes split each dot product (coalesced rows).
// delta and dO . v_s are summed in the same order, so a row whose weight is all on one key (O = v_s exactly) gets a
// logit gradient of exactly 0, as plain PyTorch does.
template <typename scalar_t, typename acc_t>
__global__ void backward_scores_kernel(SharedValueParams p, const int64_t* lengths, const scalar_t* __restrict__ dout,
                                       const scalar_t* __restrict__ q, const scalar_t* __restrict__ k,
                                       const scalar_t* __restrict__ v, const scalar_t* __restrict__ out,
                                       const acc_t* __restrict__ lse, acc_t* __restrict__ prob,
                                       acc_t* __restrict__ grad_logit) {
  const int64_t row = blockIdx.x;  // (b * H + h) * T + t
  const int64_t bh = row / p.query_len, b = bh / p.heads;
  const int64_t n_keys = keys_of_sentence(lengths, b, p.key_len);
  const int64_t warps = blockDim.x / gpu::kWarpSize, warp = threadIdx.x / gpu::kWarpSize;
  const scalar_t* q_row = q + row * p.head_dim;
  const scalar_t* dout_row = dout + row * p.value_dim;
  const acc_t row_lse = lse[row], scale = static_cast<acc_t>(p.scale);
  const bool has_keys = row_lse != negative_infinity<acc_t>();
  const acc_t delta = gpu::warp_row_dot<acc_t>(dout_row, out + row * p.value_dim, p.value_dim);
  for (int64_t s = warp; s < p.key_len; s += warps) {  // the whole warp takes the same branch
    acc_t probability = 0, logit_grad = 0;
    if (s < n_keys && has_keys) {
      const acc_t logit = scale * gpu::warp_row_dot<acc_t>(q_row, k + (bh * p.key_len + s) * p.head_dim, p.head_dim);
      probability = probability_from_lse(logit, row_lse);
      const acc_t grad_prob =
          gpu::warp_row_dot<acc_t>(dout_row, v + (b * p.key_len + s) * p.value_dim, p.value_dim);  // dO . v_s
      logit_grad = scale * probability * (grad_prob - delta);
    }
    if (threadIdx.x % gpu::kWarpSize == 0) {
      prob[row * p.key_len + s] = probability;
      grad_logit[row * p.key_len + s] = logit_grad;
    }
  }
}

// Backward, second pass: thread c of block (b, x) owns column d = x * blockDim.x + c of sentence b's gradients,
//   dQ[b,h,t,d] = sum_s dS[b,h,t,s] K[b,h,s,d],  dK[b,h,s,d] = sum_t dS[b,h,t,s] Q[b,h,t,d],
//   dV[b,s,d] = sum_{h,t} P[b,h,t,s] dO[b,h,t,d],
// with dS the first pass's logit gradients: each element written once, in the input dtype. The block's threads read
// one key row's consecutive columns at a time (coalesced). Padding keys get zero gradients and are never read.
template <typename scalar_t, typename acc_t>
__global__ void backward_columns_kernel(SharedValueParams p, const int64_t* lengths, const acc_t* __restrict__ prob,
                                        const acc_t* __restrict__ grad_logit, const scalar_t* __restrict__ dout,
                                        const scalar_t* __restrict__ q, const scalar_t* __restrict__ k,
                                        scalar_t* __restrict__ dq, scalar_t* __restrict__ dk,
                                        scalar_t* __restrict__ dv) {
  const int64_t b = blockIdx.x, col = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const int64_t S = p.key_len, T = p.query_len, D = p.head_dim, Dv = p.value_dim;
  const int64_t n_keys = keys_of_sentence(lengths, b, S);
  if (col < D) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t bh = b * p.heads + h;
      const scalar_t* keys = k + bh * S * D;
      const acc_t* head_grads = grad_logit + bh * T * S;  // (T, S)
      for (int64_t t = 0; t < T; ++t) {
        acc_t acc = 0;
        for (int64_t s = 0; s < n_keys; ++s) acc += head_grads[t * S + s] * static_cast<acc_t>(keys[s * D + col]);
        dq[(bh * T + t) * D + col] = static_cast<scalar_t>(acc);
      }
      for (int64_t s = 0; s < S; ++s) {
        acc_t acc = 0;
        if (s < n_keys) {
          for (int64_t t = 0; t < T; ++t) acc += head_grads[t * S + s] * static_cast<acc_t>(q[(bh * T + t) * D + col]);
        }
        dk[(bh * S + s) * D + col] = static_cast<scalar_t>(acc);
      }
    }
  }
  if (col < Dv) {
    const int64_t rows = p.heads * T;  // the sentence's query rows, every head's
    const acc_t* sentence_probs = prob + b * rows * S;  // (H T, S)
    const scalar_t* sentence_dout = dout + b * rows * Dv;  // (H T, Dv)
    for (int64_t s = 0; s < S; ++s) {
      acc_t acc = 0;
      if (s < n_keys) {
        for (int64_t r = 0; r < rows; ++r) acc += sentence_probs[r * S + s] * static_cast<acc_t>(sentence_dout[r * Dv + col]);
      }
      dv[(b * S + s) * Dv + col] = static_cast<scalar_t>(acc);
    }
  }
}

// Dynamic shared memory of one block: the kernels keep a row of key_len values (forward) or two (backward).
constexpr size_t kMaxSharedBytes = 48 * 1024;

inline void check_shared_memory(const char* op, const SharedValueParams& p, size_t bytes) {
  TORCH_CHECK_VALUE(bytes <= kMaxSharedBytes, op, ": key_len=", p.key_len,
                    " is too long for the CUDA kernel's shared memory");
}

inline const int64_t* lengths_or_null(const at::Tensor& lengths) {
  return lengths.defined() ? lengths.data_ptr<int64_t>() : nullptr;
}

// (out, lse, probs) of mma_nmt::shared_value_attention for checked arguments.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> run_shared_value_forward(
    const SharedValueParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, bool return_probs, const gpu::Launch& launch) {
  const char* op = "mma_nmt.shared_value_attention";
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const at::Tensor lengths = contiguous_or_undefined(key_lengths);
  at::Tensor probs = return_probs ? at::zeros({p.batch, p.heads, p.query_len, p.key_len}, q.options())
                                  : at::empty({0}, q.options());
  const int64_t rows = p.batch * p.heads * p.query_len;
  const at::ScalarType lse_dtype = stats_dtype(q.scalar_type());
  if (rows == 0 || p.key_len == 0) {  // no key: zero output, lse -inf
    return {at::zeros({p.batch, p.heads, p.query_len, p.value_dim}, q.options()),
            at::full({p.batch, p.heads, p.query_len}, -std::numeric_limits<double>::infinity(),
                     q.options().dtype(lse_dtype)),
            probs};
  }
  // The kernel writes every row's output and lse (a row without keys: 0 and -inf).
  at::Tensor out = at::empty({p.batch, p.heads, p.query_len, p.value_dim}, q.options());
  at::Tensor lse = at::empty({p.batch, p.heads, p.query_len}, q.options().dtype(lse_dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, qc.scalar_type(), "mma_nmt::shared_value_attention cuda",
                                  [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const size_t bytes = p.key_len * sizeof(acc_t);
    check_shared_memory(op, p, bytes);
    gpu::launch_kernel(&forward_kernel<scalar_t, acc_t>, dim3(static_cast<unsigned>(rows)), dim3(kThreads), bytes,
                       launch, p, lengths_or_null(lengths), qc.data_ptr<scalar_t>(), kc.data_ptr<scalar_t>(),
                       vc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), lse.data_ptr<acc_t>(),
                       return_probs ? probs.data_ptr<scalar_t>() : nullptr);
  });
  return {out, lse, probs};
}

// Threads per block of the backward's column pass.
constexpr int kColumnThreads = 128;

// (grad_q, grad_k, grad_v) of mma_nmt::shared_value_attention_backward for checked arguments: two launches (scores,
// then columns), the first in blocks of launch.warps_per_block warps (one under the emulator).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> run_shared_value_backward(
    const SharedValueParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
    const gpu::Launch& launch) {
  const at::Tensor dout = grad_out.contiguous(), qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const at::Tensor oc = out.contiguous(), lc = lse.contiguous();
  const at::Tensor lengths = contiguous_or_undefined(key_lengths);
  if (p.batch * p.heads * p.query_len == 0 || p.key_len == 0) {  // as on the CPU: a zero head dim still has grad_v
    return {at::zeros_like(qc), at::zeros_like(kc), at::zeros_like(vc)};
  }
  // Every element of the scratch and of the gradients is written once: no zero fill.
  const at::ScalarType acc_type = at::toOpMathType(q.scalar_type());
  const int64_t rows = p.batch * p.heads * p.query_len;
  at::Tensor prob = at::empty({rows, p.key_len}, q.options().dtype(acc_type));
  at::Tensor grad_logit = at::empty({rows, p.key_len}, q.options().dtype(acc_type));
  at::Tensor dq = at::empty_like(qc), dk = at::empty_like(kc), dv = at::empty_like(vc);
  const int64_t columns = std::max(p.head_dim, p.value_dim);
  const dim3 column_grid(static_cast<unsigned>(p.batch),
                         static_cast<unsigned>(std::max<int64_t>(1, (columns + kColumnThreads - 1) / kColumnThreads)));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, qc.scalar_type(),
                                  "mma_nmt::shared_value_attention_backward cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    gpu::launch_kernel(&backward_scores_kernel<scalar_t, acc_t>, dim3(static_cast<unsigned>(rows)),
                       gpu::warp_block(launch, "shared_value_attention"), 0, launch, p, lengths_or_null(lengths),
                       dout.data_ptr<scalar_t>(), qc.data_ptr<scalar_t>(), kc.data_ptr<scalar_t>(),
                       vc.data_ptr<scalar_t>(), oc.data_ptr<scalar_t>(), lc.data_ptr<acc_t>(), prob.data_ptr<acc_t>(),
                       grad_logit.data_ptr<acc_t>());
    gpu::launch_kernel(&backward_columns_kernel<scalar_t, acc_t>, column_grid, dim3(kColumnThreads), 0, launch, p,
                       lengths_or_null(lengths), prob.data_ptr<acc_t>(), grad_logit.data_ptr<acc_t>(),
                       dout.data_ptr<scalar_t>(), qc.data_ptr<scalar_t>(), kc.data_ptr<scalar_t>(),
                       dq.data_ptr<scalar_t>(), dk.data_ptr<scalar_t>(), dv.data_ptr<scalar_t>());
  });
  return {dq, dk, dv};
}

}  // namespace mma_nmt::luong::cuda
