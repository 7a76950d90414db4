// Multi-layer attention on the CPU (SPEC section 3). Each fused head (multilayer_params.h) is an attention head whose
// rows are pieces of the per-layer projections: the attention kernel's blocks (attention/cpu/attention_blocks.h) read
// keys and values in place in the projections' layout; only the query rows (and, in the backward, the output-gradient
// rows), which the score products need contiguous, are gathered into cache. The output is written in place; the
// gradients are summed in cache and streamed to their places in the projections' layout (non-temporal stores: these
// fresh tensors are not read from memory first). So the projections are never arranged into a (B, H, L, n*D) tensor:
// in plain PyTorch that copy through memory and its backward cost 41-51% of the fused attention core
// (benchmarks/results/2026-11-22.md). A thread runs the heads of a sentence one after the other, and before the first it
// reads that sentence's rows front to back (sentence_warmer.h): read piece by piece from memory they came slowly.
// Included by multilayer_kernel_<isa>.cpp after it has chosen the instruction set (CPU_CAPABILITY).
#include "attention/cpu/attention_blocks.h"
#include "multilayer/cpu/kernel_api.h"
#include "multilayer/cpu/sentence_warmer.h"

namespace mma_nmt::multilayer::cpu::MMA_NMT_CPU_ISA {
namespace {

namespace blocks = ::mma_nmt::attention::cpu::MMA_NMT_CPU_ISA;
using attention::AttentionParams;
using blocks::Pieces;

// Which tensors of a list make up fused head `fused_head`, and the head within them.
struct HeadSource {
  int64_t first = 0, count = 0;  // tensors [first, first + count)
  int64_t head = 0;              // h: columns [h * width, (h + 1) * width) of each
};

// `sets`: how many tensors the list holds (layers for q/k, value sets for v and the output's column blocks).
HeadSource head_source(const MultilayerParams& p, int64_t fused_head, int64_t sets) {
  if (p.layer_specific) return {fused_head / p.num_heads, 1, fused_head % p.num_heads};
  return {0, sets, fused_head};
}

// Pieces of sentence b (of `len` rows of `row_stride` values in every tensor) for the head `src` names.
template <typename P>
Pieces<P> pieces(const std::vector<P>& tensors, const HeadSource& src, int64_t b, int64_t len, int64_t width,
                 int64_t row_stride) {
  Pieces<P> out;
  out.width = width;
  out.stride = row_stride;
  for (int64_t s = src.first; s < src.first + src.count; ++s) {
    out.base.push_back(tensors[s] + b * len * row_stride + src.head * width);
  }
  return out;
}

// dst (rows, count * width) = rows [r0, r0 + rows) of the pieces, side by side.
template <typename T>
void gather_rows(const Pieces<const T*>& src, int64_t r0, int64_t rows, T* dst) {
  const int64_t w = src.width, n = src.count();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < n; ++s) {
      const T* from = src.base[s] + (r0 + r) * src.stride;
      std::copy(from, from + w, dst + (r * n + s) * w);
    }
  }
}

template <typename P>
std::vector<P> data_pointers(const std::vector<at::Tensor>& tensors) {
  using T = std::remove_const_t<std::remove_pointer_t<P>>;
  std::vector<P> out;
  for (const at::Tensor& x : tensors) out.push_back(x.data_ptr<T>());
  return out;
}

// Column blocks [j * Ev, (j + 1) * Ev) of an output row, one per output set, as if they were separate tensors.
template <typename P>
std::vector<P> output_sets(P out, const MultilayerParams& p) {
  std::vector<P> sets;
  for (int64_t j = 0; j < p.output_sets(); ++j) sets.push_back(out + j * p.value_embed_dim());
  return sets;
}

// A warmer (sentence_warmer.h) of the projections' rows that a sentence's heads read in pieces.
template <typename T>
SentenceWarmer projections_warmer(const std::vector<const T*>& q, const std::vector<const T*>& k,
                                  const std::vector<const T*>& v, const MultilayerParams& mp) {
  SentenceWarmer warm;
  for (const T* x : q) warm.add(x, mp.query_len * mp.embed_dim());
  for (const T* x : k) warm.add(x, mp.key_len * mp.embed_dim());
  for (const T* x : v) warm.add(x, mp.key_len * mp.value_embed_dim());
  return warm;
}

template <typename T>
void forward_typed(const MultilayerParams& mp, MultilayerForward& t) {
  const AttentionParams p = mp.fused();
  const int64_t T_len = p.query_len, S = p.key_len, D = mp.head_dim, Dv = mp.value_head_dim;
  const int64_t E = mp.embed_dim(), Ev = mp.value_embed_dim(), W = mp.output_sets() * Ev;
  const int64_t Dk = p.head_dim, Dvk = p.value_dim;  // a fused head's q/k and value row lengths
  const int64_t ld = blocks::packed_row_length<T>(S);
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const int64_t n_blocks = (T_len + blocks::kQueryBlock - 1) / blocks::kQueryBlock;
  const auto q = data_pointers<const T*>(t.q), k = data_pointers<const T*>(t.k), v = data_pointers<const T*>(t.v);
  const auto out = output_sets<T*>(t.out.data_ptr<T>(), mp);
  T* lse = t.lse.data_ptr<T>();
  T* probs = t.probs.defined() ? t.probs.data_ptr<T>() : nullptr;
  SentenceWarmer warm = projections_warmer(q, k, v, mp);
  warm.add(out[0], T_len * W);  // written in pieces
  // Tasks are (sentence, fused head, query block), head-major, so a thread packs a head's keys once for all blocks and
  // runs a sentence's heads one after the other.
  at::parallel_for(0, p.batch * p.heads * n_blocks, 1, [&](int64_t begin, int64_t end) {
    blocks::ForwardScratch<T> scratch(Dk, Dvk, ld);
    std::vector<T> q_rows(blocks::kQueryBlock * Dk);
    SentenceWarmer warmer = warm;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / n_blocks, first_row = (task % n_blocks) * blocks::kQueryBlock;
      const int64_t b = bh / p.heads, h = bh % p.heads;
      warmer.before_sentence(b);
      const int64_t n_rows = std::min(blocks::kQueryBlock, T_len - first_row);
      const int64_t n_keys = keys_of_sentence(lengths, b, S);
      const HeadSource keys = head_source(mp, h, mp.layers), values = head_source(mp, h, mp.output_sets());
      if (scratch.packed_head != bh) {
        blocks::pack_pieces(pieces(k, keys, b, S, D, E), n_keys, scratch.keys_t.data(), ld);  // (Dk, ld)
        scratch.packed_head = bh;
      }
      gather_rows(pieces(q, keys, b, T_len, D, E), first_row, n_rows, q_rows.data());  // (n_rows, Dk)
      const int64_t row = bh * T_len + first_row;  // the block's first row among all (B * heads * T)
      blocks::forward_block<T>(p, b, h, first_row, n_rows, n_keys, q_rows.data(), Dk, scratch.keys_t.data(), ld,
                               pieces(v, values, b, S, Dv, Ev), pieces(out, values, b, T_len, Dv, W).from_row(first_row),
                               lse + row, probs ? probs + row * S : nullptr, scratch);
    }
  });
}

template <typename T>
void backward_typed(const MultilayerParams& mp, MultilayerBackward& t) {
  const AttentionParams p = mp.fused();
  const int64_t T_len = p.query_len, S = p.key_len, D = mp.head_dim, Dv = mp.value_head_dim;
  const int64_t E = mp.embed_dim(), Ev = mp.value_embed_dim(), W = mp.output_sets() * Ev;
  const int64_t Dk = p.head_dim, Dvk = p.value_dim;
  const int64_t ld = blocks::packed_row_length<T>(S);
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const auto q = data_pointers<const T*>(t.q), k = data_pointers<const T*>(t.k), v = data_pointers<const T*>(t.v);
  const auto dq = data_pointers<T*>(t.grad_q), dk = data_pointers<T*>(t.grad_k), dv = data_pointers<T*>(t.grad_v);
  const auto dout = output_sets<const T*>(t.grad_out.data_ptr<T>(), mp);
  const auto out = output_sets<const T*>(t.out.data_ptr<T>(), mp);
  const T* lse = t.lse.data_ptr<T>();
  const T* probs = t.probs.defined() ? t.probs.data_ptr<T>() : nullptr;
  // With the forward's weights and all keys in one tile, backward_head takes delta = rowsum(P * dP) from the tile
  // instead of rowsum(dO * O): the output is then not read at all, nor are the keys packed (no q k^T to recompute).
  const bool delta_from_weights = probs != nullptr && p.dropout_p == 0 && S <= blocks::kKeyTile;
  SentenceWarmer warm = projections_warmer(q, k, v, mp);  // the gradients are streamed, not read
  warm.add(dout[0], T_len * W);
  if (!delta_from_weights) warm.add(out[0], T_len * W);
  at::parallel_for(0, p.batch * p.heads, 1, [&](int64_t begin, int64_t end) {
    blocks::BackwardScratch<T> scratch(Dk, Dvk, ld, T_len);
    std::vector<T> q_rows(T_len * Dk), dout_rows(T_len * Dvk);  // the head's rows, gathered
    std::vector<T> dq_rows(T_len * Dk), dk_rows(S * Dk), dv_rows(S * Dvk);  // its gradients, before streaming out
    SentenceWarmer warmer = warm;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / p.heads, h = bh % p.heads;
      warmer.before_sentence(b);
      const int64_t n_keys = keys_of_sentence(lengths, b, S);
      const HeadSource keys = head_source(mp, h, mp.layers), values = head_source(mp, h, mp.output_sets());
      const auto key_rows = pieces(k, keys, b, S, D, E);
      if (probs == nullptr) blocks::pack_pieces(key_rows, n_keys, scratch.keys_t.data(), ld);     // (Dk, ld)
      blocks::pack_pieces(pieces(v, values, b, S, Dv, Ev), n_keys, scratch.values_t.data(), ld);  // (Dvk, ld)
      gather_rows(pieces(q, keys, b, T_len, D, E), 0, T_len, q_rows.data());                      // (T, Dk)
      gather_rows(pieces(dout, values, b, T_len, Dv, W), 0, T_len, dout_rows.data());             // (T, Dvk)
      if (!delta_from_weights) {
        const auto out_rows = pieces(out, values, b, T_len, Dv, W);
        // rowsum(dO * O), summed over the pieces as dP is
        blocks::row_deltas(blocks::one_piece<const T*>(dout_rows.data(), Dvk), out_rows, T_len, scratch);
      }
      // The gradients are summed in cache, then streamed to their places in the (fresh) gradient tensors. Fused heads
      // own disjoint pieces of them (columns of a head, rows of a sentence): no collisions.
      blocks::backward_head<T>(p, b, h, n_keys, dout_rows.data(), Dvk, q_rows.data(), Dk, lse + bh * T_len,
                               delta_from_weights ? nullptr : scratch.delta.data(),
                               probs ? probs + bh * T_len * S : nullptr, key_rows,
                               blocks::one_piece<T*>(dq_rows.data(), Dk), blocks::one_piece<T*>(dk_rows.data(), Dk),
                               blocks::one_piece<T*>(dv_rows.data(), Dvk), scratch);
      blocks::stream_to_pieces(dq_rows.data(), Dk, T_len, pieces(dq, keys, b, T_len, D, E));
      blocks::stream_to_pieces(dk_rows.data(), Dk, S, pieces(dk, keys, b, S, D, E));
      blocks::stream_to_pieces(dv_rows.data(), Dvk, S, pieces(dv, values, b, S, Dv, Ev));
    }
    blocks::stream_fence();
  });
}

}  // namespace

void multilayer_forward(const MultilayerParams& p, MultilayerForward& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q[0].scalar_type(), "mma_nmt::multilayer_attention cpu forward",
                             [&] { forward_typed<scalar_t>(p, t); });
}

void multilayer_backward(const MultilayerParams& p, MultilayerBackward& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q[0].scalar_type(), "mma_nmt::multilayer_attention cpu backward",
                             [&] { backward_typed<scalar_t>(p, t); });
}

}  // namespace mma_nmt::multilayer::cpu::MMA_NMT_CPU_ISA
