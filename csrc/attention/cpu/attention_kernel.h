// Fused attention on the CPU: tiled online softmax over the interval of keys each head kind allows (head_mask.h).
// Included by attention_kernel_<isa>.cpp after it has chosen the instruction set (CPU_CAPABILITY), so every build of
// these templates lives in its own namespace.
#include "attention/cpu/attention_blocks.h"
#include "attention/cpu/kernel_api.h"

namespace mma_nmt::attention::cpu::MMA_NMT_CPU_ISA {
namespace {

// Rows of the heads of one (B, H, len, dim) tensor, read or written in place through its strides: head (b, h) starts
// at head(b, h), its rows row_stride apart, each contiguous (attention_cpu.cpp makes sure).
template <typename P>
struct HeadRows {
  P data;
  int64_t batch_stride, head_stride, row_stride;
  P head(int64_t b, int64_t h) const { return data + b * batch_stride + h * head_stride; }
  // The rows of head (b, h), `width` values each, as the blocks take them.
  Pieces<P> piece(int64_t b, int64_t h, int64_t width) const { return one_piece(head(b, h), width, row_stride); }
};

template <typename T>
HeadRows<T*> head_rows(const at::Tensor& x) {
  return {x.data_ptr<std::remove_const_t<T>>(), x.stride(0), x.stride(1), x.stride(2)};
}

template <typename T>
void forward_typed(const AttentionParams& p, ForwardTensors& t) {
  const int64_t T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const int64_t ld = packed_row_length<T>(S);  // row length of the packed keys
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const int64_t blocks = (T_len + kQueryBlock - 1) / kQueryBlock;
  const HeadRows<const T*> q = head_rows<const T>(t.q), k = head_rows<const T>(t.k), v = head_rows<const T>(t.v);
  const HeadRows<T*> out = head_rows<T>(t.out);
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
        pack_transposed(k.head(b, h), n_keys, D, k.row_stride, scratch.keys_t.data(), ld);  // (D, ld)
        scratch.packed_head = bh;
      }
      const int64_t row = bh * T_len + first_row;  // the block's first row among all (B * H * T) of lse and probs
      forward_block<T>(p, b, h, first_row, n_rows, n_keys, q.head(b, h) + first_row * q.row_stride, q.row_stride,
                       scratch.keys_t.data(), ld, v.piece(b, h, Dv),
                       out.piece(b, h, Dv).from_row(first_row), lse + row,
                       probs ? probs + row * S : nullptr, scratch);
    }
  });
}


template <typename T>
void backward_typed(const AttentionParams& p, BackwardTensors& t) {
  const int64_t T_len = p.query_len, S = p.key_len, D = p.head_dim, Dv = p.value_dim;
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const HeadRows<const T*> dout = head_rows<const T>(t.grad_out), q = head_rows<const T>(t.q);
  const HeadRows<const T*> k = head_rows<const T>(t.k), v = head_rows<const T>(t.v), out = head_rows<const T>(t.out);
  const HeadRows<T*> dq = head_rows<T>(t.grad_q), dk = head_rows<T>(t.grad_k), dv = head_rows<T>(t.grad_v);
  const T* lse = t.lse.data_ptr<T>();
  at::parallel_for(0, p.batch * p.heads, 1, [&](int64_t begin, int64_t end) {
    const int64_t ld = packed_row_length<T>(S);
    BackwardScratch<T> scratch(D, Dv, ld, T_len);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / p.heads, h = bh % p.heads;
      const int64_t n_keys = keys_of_sentence(lengths, b, S);
      pack_transposed(k.head(b, h), n_keys, D, k.row_stride, scratch.keys_t.data(), ld);     // (D, ld)
      pack_transposed(v.head(b, h), n_keys, Dv, v.row_stride, scratch.values_t.data(), ld);  // (Dv, ld)
      row_deltas(dout.piece(b, h, Dv), out.piece(b, h, Dv), T_len, scratch);               // rowsum(dO * O)
      backward_head<T>(p, b, h, n_keys, dout.head(b, h), dout.row_stride, q.head(b, h), q.row_stride, lse + bh * T_len,
                       scratch.delta.data(), nullptr, k.piece(b, h, D), dq.piece(b, h, D), dk.piece(b, h, D),
                       dv.piece(b, h, Dv), scratch);
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
