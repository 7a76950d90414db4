// CUDA kernels of mma_nmt::shared_value_attention and its backward, and their launches for checked arguments.
// Deliberately simple: forward runs one block per query row (threads over keys for the scores, then over value
// columns); backward runs one block per sentence, so that it owns the sentence's key and value gradients (no atomics,
// one launch). Accumulates in float (double for double); float32, float16, bfloat16 and float64 inputs.
//
// Device source and device-agnostic launch code: compiled by nvcc (luong_cuda.cu) and under the HIP CPU emulator
// (tests/cpp/emulated). Every thread of a block passes the same __syncthreads, as the emulator requires.
#pragma once

#include "common/cuda_compat.h"  // first: under the emulator torch's headers must precede HIP's

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

#include <limits>
#include <optional>
#include <tuple>

#include "common/key_lengths.h"
#include "common/online_softmax.h"
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

// One block per sentence: its heads, and their rows, one after another, so that the block owns the sentence's key
// gradient (every head's) and its value gradient (shared by the heads): thread d adds column d of each, and no other
// block writes them (no atomics). They are summed in the accumulation type in dk_acc / dv_acc, which the block zeroes
// first and, for half-precision inputs (dk / dv not null), casts into dk / dv at the end: one launch in all.
template <typename scalar_t, typename acc_t>
__global__ void backward_kernel(SharedValueParams p, const int64_t* lengths, const scalar_t* __restrict__ dout,
                                const scalar_t* __restrict__ q, const scalar_t* __restrict__ k,
                                const scalar_t* __restrict__ v, const scalar_t* __restrict__ out,
                                const acc_t* __restrict__ lse, scalar_t* __restrict__ dq, acc_t* __restrict__ dk_acc,
                                acc_t* __restrict__ dv_acc, scalar_t* __restrict__ dk, scalar_t* __restrict__ dv) {
  MMA_NMT_DYNAMIC_SHARED(acc_t, prob);  // (2 * key_len,): the probabilities, then the logit gradients
  acc_t* grad_logit = prob + p.key_len;
  __shared__ acc_t delta;
  const int64_t b = blockIdx.x;
  const int64_t n_keys = keys_of_sentence(lengths, b, p.key_len);
  const int64_t key_block = p.heads * p.key_len * p.head_dim, value_block = p.key_len * p.value_dim;
  acc_t* sentence_dk = dk_acc + b * key_block;    // (H, S, D)
  acc_t* sentence_dv = dv_acc + b * value_block;  // (S, Dv)
  for (int64_t e = threadIdx.x; e < key_block; e += blockDim.x) sentence_dk[e] = 0;
  for (int64_t e = threadIdx.x; e < value_block; e += blockDim.x) sentence_dv[e] = 0;
  __syncthreads();
  const scalar_t* values = v + b * value_block;
  for (int64_t h = 0; h < p.heads; ++h) {
    const int64_t bh = b * p.heads + h;
    const scalar_t* keys = k + bh * p.key_len * p.head_dim;
    acc_t* head_dk = sentence_dk + h * p.key_len * p.head_dim;
    for (int64_t t = 0; t < p.query_len; ++t) {
      const int64_t row = bh * p.query_len + t;
      const acc_t row_lse = lse[row];
      const scalar_t* dout_row = dout + row * p.value_dim;
      if (threadIdx.x == 0) delta = dot_of<scalar_t, acc_t>(dout_row, out + row * p.value_dim, p.value_dim);
      __syncthreads();
      for (int64_t s = threadIdx.x; s < n_keys; s += blockDim.x) {
        const acc_t logit =
            acc_t(p.scale) * dot_of<scalar_t, acc_t>(q + row * p.head_dim, keys + s * p.head_dim, p.head_dim);
        prob[s] = probability_from_lse(logit, row_lse);
        const acc_t dp = dot_of<scalar_t, acc_t>(dout_row, values + s * p.value_dim, p.value_dim);
        grad_logit[s] = prob[s] * (dp - delta) * acc_t(p.scale);
      }
      __syncthreads();
      for (int64_t d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
        acc_t acc = 0;
        for (int64_t s = 0; s < n_keys; ++s) acc += grad_logit[s] * static_cast<acc_t>(keys[s * p.head_dim + d]);
        dq[row * p.head_dim + d] = static_cast<scalar_t>(acc);
        const acc_t q_d = static_cast<acc_t>(q[row * p.head_dim + d]);
        for (int64_t s = 0; s < n_keys; ++s) head_dk[s * p.head_dim + d] += grad_logit[s] * q_d;
      }
      for (int64_t c = threadIdx.x; c < p.value_dim; c += blockDim.x) {
        const acc_t g = static_cast<acc_t>(dout_row[c]);
        for (int64_t s = 0; s < n_keys; ++s) sentence_dv[s * p.value_dim + c] += prob[s] * g;
      }
      __syncthreads();
    }
  }
  if (dk == nullptr) return;  // the accumulators are the outputs
  __syncthreads();
  for (int64_t e = threadIdx.x; e < key_block; e += blockDim.x) {
    dk[b * key_block + e] = static_cast<scalar_t>(sentence_dk[e]);
  }
  for (int64_t e = threadIdx.x; e < value_block; e += blockDim.x) {
    dv[b * value_block + e] = static_cast<scalar_t>(sentence_dv[e]);
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

// (grad_q, grad_k, grad_v) of mma_nmt::shared_value_attention_backward for checked arguments.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> run_shared_value_backward(
    const SharedValueParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
    const gpu::Launch& launch) {
  const char* op = "mma_nmt.shared_value_attention_backward";
  const at::Tensor dout = grad_out.contiguous(), qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const at::Tensor oc = out.contiguous(), lc = lse.contiguous();
  const at::Tensor lengths = contiguous_or_undefined(key_lengths);
  if (p.batch * p.heads * p.query_len == 0 || p.key_len == 0) {  // as on the CPU: a zero head dim still has grad_v
    return {at::zeros_like(qc), at::zeros_like(kc), at::zeros_like(vc)};
  }
  // Every element is written by the kernel: the gradients and accumulators need no zero fill.
  const at::ScalarType acc_type = at::toOpMathType(q.scalar_type());
  const bool widened = acc_type != q.scalar_type();  // half precision: float accumulators, cast at the end
  at::Tensor dq = at::empty_like(qc), dk = at::empty_like(kc), dv = at::empty_like(vc);
  at::Tensor dk_acc = widened ? at::empty(kc.sizes(), kc.options().dtype(acc_type)) : dk;
  at::Tensor dv_acc = widened ? at::empty(vc.sizes(), vc.options().dtype(acc_type)) : dv;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, qc.scalar_type(),
                                  "mma_nmt::shared_value_attention_backward cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const size_t bytes = 2 * p.key_len * sizeof(acc_t);
    check_shared_memory(op, p, bytes);
    gpu::launch_kernel(&backward_kernel<scalar_t, acc_t>, dim3(static_cast<unsigned>(p.batch)), dim3(kThreads), bytes,
                       launch, p, lengths_or_null(lengths), dout.data_ptr<scalar_t>(), qc.data_ptr<scalar_t>(),
                       kc.data_ptr<scalar_t>(), vc.data_ptr<scalar_t>(), oc.data_ptr<scalar_t>(), lc.data_ptr<acc_t>(),
                       dq.data_ptr<scalar_t>(), dk_acc.data_ptr<acc_t>(), dv_acc.data_ptr<acc_t>(),
                       widened ? dk.data_ptr<scalar_t>() : nullptr, widened ? dv.data_ptr<scalar_t>() : nullptr);
  });
  return {dq, dk, dv};
}

}  // namespace mma_nmt::luong::cuda
