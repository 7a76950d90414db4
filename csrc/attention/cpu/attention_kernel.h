// Fused attention on the CPU: tiled online softmax over the interval of keys each head kind allows (head_mask.h).
// Included by attention_kernel_<isa>.cpp after it has chosen the instruction set (CPU_CAPABILITY), so every build of
// these templates lives in its own namespace.
#include "attention/cpu/attention_blocks.h"
#include "attention/cpu/kernel_api.h"

namespace mma_nmt::attention::cpu::MMA_NMT_CPU_ISA {
namespace {

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
        pack_transposed(k + bh * S * D, n_keys, D, D, scratch.keys_t.data(), ld);  // (D, ld)
        scratch.packed_head = bh;
      }
      const int64_t row = bh * T_len + first_row;  // the block's first row among all (B * H * T)
      forward_block<T>(p, b, h, first_row, n_rows, n_keys, q + row * D, scratch.keys_t.data(), ld,
                       one_piece(v + bh * S * Dv, Dv), one_piece(out + row * Dv, Dv), lse + row,
                       probs ? probs + row * S : nullptr, scratch);
    }
  });
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
    const int64_t ld = packed_row_length<T>(S);
    BackwardScratch<T> scratch(D, Dv, ld, T_len);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / p.heads, h = bh % p.heads;
      const int64_t n_keys = keys_of_sentence(lengths, b, S);
      const T *head_k = k + bh * S * D, *head_dout = dout + bh * T_len * Dv, *head_out = out + bh * T_len * Dv;
      pack_transposed(head_k, n_keys, D, D, scratch.keys_t.data(), ld);             // (D, ld)
      pack_transposed(v + bh * S * Dv, n_keys, Dv, Dv, scratch.values_t.data(), ld);  // (Dv, ld)
      for (int64_t i = 0; i < T_len; ++i) {  // rowsum(dO * O)
        scratch.delta[i] = dot(head_dout + i * Dv, head_out + i * Dv, Dv);
      }
      backward_head<T>(p, b, h, n_keys, head_dout, q + bh * T_len * D, lse + bh * T_len, scratch.delta.data(),
                       nullptr, one_piece(head_k, D), one_piece(dq + bh * T_len * D, D), one_piece(dk + bh * S * D, D),
                       one_piece(dv + bh * S * Dv, Dv), scratch);
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
