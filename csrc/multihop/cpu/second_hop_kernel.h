// The whole second hop of multi-hop attention on the CPU (SPEC section 4), its projections included
// (mma_nmt::multihop_second_hop). Per block of positions and per head, the rows [q_h | a_h] are gathered into cache
// once; the pre-activation W_b q_h + U_b_h a_h is one product of depth 2D against [W_b^T; U_b_h^T] and the value
// projection U_c_h a_h another, on the attention kernels' register-blocked tiles (attention/cpu/attention_tiles.h). So
// the (B, H, T, ·) projections never go through memory: only hidden = tanh(pre), which backward reads, is written.
//
// Backward, per block, with g_h = grad_out_h U_c_h (it gives dL/dbeta_h = g_h . a_h and a's gradient beta_h g_h):
//   de = softmax backward over heads,  dpre_h = de_h v_b (1 - hidden_h^2),
//   [grad_q_h | grad_a_h] = dpre_h [W_b | U_b_h] + [0 | beta_h g_h],
//   [dW_b | dU_b_h] += dpre_h^T [q_h | a_h],  dU_c_h += (beta_h grad_out_h)^T a_h,  dv_b += de_h hidden_h.
// The weight gradients are summed per chunk of blocks (one chunk per thread) in cache, and the chunks are added in
// a fixed order at the end. Included by second_hop_kernel_<isa>.cpp after it has chosen the instruction set.
#include "attention/cpu/attention_blocks.h"
#include "multihop/cpu/kernel_api.h"
#include "multihop/head_gate.h"

namespace mma_nmt::multihop::cpu::MMA_NMT_CPU_ISA {
namespace {

#include "multihop/cpu/gate_vectors.h"

namespace tiles = ::mma_nmt::attention::cpu::MMA_NMT_CPU_ISA;

constexpr int64_t kBlock = 32;  // positions per block: rows of every product; the weight gradients' depth per update

template <typename T>
int64_t padded(int64_t n) {
  return tiles::round_up_to_vector<T>(n);
}

// dst (rows x ld) = src (rows x cols) row-major; columns [cols, ld) of dst are zero.
template <typename T>
void pack_rows(const T* src, int64_t rows, int64_t cols, T* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * cols, src + (r + 1) * cols, dst + r * ld);
    std::fill(dst + r * ld + cols, dst + (r + 1) * ld, T(0));
  }
}

// out (n_rows x ld) = rows (n_rows x depth, row stride row_stride) @ cols_t (depth x ld); ld is whole vectors.
template <typename T>
void product(const T* rows, int64_t row_stride, int64_t n_rows, const T* cols_t, int64_t ld, int64_t depth, T* out,
             int64_t out_stride) {
  constexpr int64_t R = tiles::Blocking<T>::kRows;
  for (int64_t r = 0; r < n_rows; r += R) {
    tiles::score_group<T>(rows + r * row_stride, row_stride, std::min(R, n_rows - r), cols_t, ld, 0, ld, depth, T(1),
                          out + r * out_stride, out_stride);
  }
}

// acc (nx x width) += W^T @ mat for W (n_rows x nx, row stride w_stride) and mat (n_rows x width, row stride
// mat_stride): a weight gradient's update from one block of positions.
template <typename T>
void accumulate_transposed(const T* w, int64_t w_stride, int64_t nx, int64_t n_rows, const T* mat,
                           int64_t mat_stride, int64_t width, T* acc) {
  const auto all_rows = [n_rows](int64_t) { return attention::KeyRange{0, n_rows}; };
  tiles::accumulate_products<T>(w, 1, w_stride, nx, all_rows, mat, mat_stride, width, acc, width);
}

// Positions [n0, n0 + rows) as (sentence, step) pairs.
struct Block {
  int64_t n0 = 0, rows = 0, query_len = 1;
  int64_t sentence(int64_t r) const { return (n0 + r) / query_len; }
  int64_t step(int64_t r) const { return (n0 + r) % query_len; }
};

// x (rows x 2D) = [q_h | a_h] of the block's positions.
template <typename T>
void gather_inputs(const Rows<T>& q, const Rows<T>& a, int64_t h, const Block& blk, int64_t D, T* x) {
  for (int64_t r = 0; r < blk.rows; ++r) {
    const T* q_row = q(blk.sentence(r), h, blk.step(r));
    const T* a_row = a(blk.sentence(r), h, blk.step(r));
    std::copy(q_row, q_row + D, x + r * 2 * D);
    std::copy(a_row, a_row + D, x + r * 2 * D + D);
  }
}

// u[0:n] = tanh(u[0:n]) in place; returns v . u.
template <typename T>
T tanh_in_place_dot(T* u, const T* v, int64_t n) {
  using Vec = Vectorized<T>;
  Vec acc(T(0));
  for_vectors<T>(n, [&](int64_t d, int64_t count) {
    const Vec x = tanh_vec(Vec::loadu(u + d, count));
    x.store(u + d, count);
    acc = at::vec::fmadd(Vec::loadu(v + d, count), x, acc);
  });
  return sum_lanes(acc);
}

// ---- forward ----

template <typename T>
void forward_typed(const SecondHopParams& p, SecondHopForward& t) {
  const int64_t H = p.heads, D = p.head_dim, Db = p.hop_dim, Dc = p.value_dim;
  const int64_t dbp = padded<T>(Db), dcp = padded<T>(Dc), x_ld = 2 * D;
  // Per head: [W_b^T; U_b_h^T] (2D x dbp) and U_c_h^T (D x dcp), depth-major for the products (columns past Db and
  // Dc zero).
  std::vector<T> pre_w(H * x_ld * dbp), value_w(p.project_values ? H * D * dcp : 0);
  const T *w_b = t.w_b.data_ptr<T>(), *u_b = t.u_b.data_ptr<T>(), *v_b = t.v_b.data_ptr<T>();
  for (int64_t h = 0; h < H; ++h) {
    tiles::pack_transposed(w_b, Db, D, D, pre_w.data() + h * x_ld * dbp, dbp);
    tiles::pack_transposed(u_b + h * Db * D, Db, D, D, pre_w.data() + h * x_ld * dbp + D * dbp, dbp);
    if (p.project_values) {
      tiles::pack_transposed(t.u_c.data_ptr<T>() + h * Dc * D, Dc, D, D, value_w.data() + h * D * dcp, dcp);
    }
  }
  const Rows<T> q(t.q), a(t.a);
  const MutableRows<T> out(t.out), hidden(t.hidden);
  T* gate = t.gate.data_ptr<T>();
  const int64_t blocks = (p.positions() + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    std::vector<T> x(kBlock * x_ld), pre(kBlock * dbp), values(H * kBlock * dcp), scores(kBlock * H);
    for (int64_t block = first; block < last; ++block) {
      const Block blk{block * kBlock, std::min(kBlock, p.positions() - block * kBlock), p.query_len};
      for (int64_t h = 0; h < H; ++h) {
        gather_inputs(q, a, h, blk, D, x.data());
        product(x.data(), x_ld, blk.rows, pre_w.data() + h * x_ld * dbp, dbp, x_ld, pre.data(), dbp);
        for (int64_t r = 0; r < blk.rows; ++r) {
          T* u = pre.data() + r * dbp;
          scores[r * H + h] = tanh_in_place_dot(u, v_b, Db);  // e_h
          std::copy(u, u + Db, hidden(blk.sentence(r), h, blk.step(r)));
        }
        T* value = values.data() + h * kBlock * dcp;
        if (p.project_values) {
          product(x.data() + D, x_ld, blk.rows, value_w.data() + h * D * dcp, dcp, D, value, dcp);
        } else {
          for (int64_t r = 0; r < blk.rows; ++r) {
            std::copy(x.data() + r * x_ld + D, x.data() + (r + 1) * x_ld, value + r * dcp);  // a_h
          }
        }
      }
      for (int64_t r = 0; r < blk.rows; ++r) {
        T* beta = scores.data() + r * H;
        softmax_over_heads(beta, H);
        const int64_t b = blk.sentence(r), i = blk.step(r);
        for (int64_t h = 0; h < H; ++h) {
          gate[head_row(blk.n0 + r, h, H, p.query_len)] = beta[h];
          tiles::scale_row_to(values.data() + (h * kBlock + r) * dcp, Dc, beta[h], out(b, h, i));
        }
      }
    }
  });
}

// ---- backward ----

// The weights as backward's products read them, packed once per call.
template <typename T>
struct BackwardPacks {
  int64_t dp = 0, dbp = 0, dcp = 0;
  std::vector<T> input_w;  // per head (Db x 2dp): row c = [W_b[c] | U_b_h[c]], each padded to dp
  std::vector<T> value_w;  // per head (Dc x dp): U_c_h, rows padded to dp (with u_c)
};

template <typename T>
BackwardPacks<T> backward_packs(const SecondHopParams& p, const SecondHopBackward& t) {
  const int64_t H = p.heads, D = p.head_dim, Db = p.hop_dim, Dc = p.value_dim;
  BackwardPacks<T> k;
  k.dp = padded<T>(D), k.dbp = padded<T>(Db), k.dcp = padded<T>(Dc);
  k.input_w.assign(H * Db * 2 * k.dp, T(0));
  const T *w_b = t.w_b.data_ptr<T>(), *u_b = t.u_b.data_ptr<T>();
  for (int64_t h = 0; h < H; ++h) {
    T* dst = k.input_w.data() + h * Db * 2 * k.dp;
    for (int64_t c = 0; c < Db; ++c) {
      std::copy(w_b + c * D, w_b + (c + 1) * D, dst + c * 2 * k.dp);
      std::copy(u_b + (h * Db + c) * D, u_b + (h * Db + c + 1) * D, dst + c * 2 * k.dp + k.dp);
    }
  }
  if (p.project_values) {
    k.value_w.resize(H * Dc * k.dp);
    for (int64_t h = 0; h < H; ++h) {
      pack_rows(t.u_c.data_ptr<T>() + h * Dc * D, Dc, D, k.value_w.data() + h * Dc * k.dp, k.dp);
    }
  }
  return k;
}

// One chunk's weight-gradient sums, in cache for the whole chunk.
template <typename T>
struct GradientSums {
  T* input;  // (H, Db, 2D): [dW_b (this head's share) | dU_b_h]
  T* value;  // (H, Dc, D): dU_c_h; unused without u_c
  T* v_b;    // (Db,)
};

template <typename T>
class BackwardBlocks {
 public:
  BackwardBlocks(const SecondHopParams& p, const SecondHopBackward& t, const BackwardPacks<T>& k)
      : p_(p), k_(k), q_(t.q), a_(t.a), grad_out_(t.grad_out), out_step_(t.grad_out.stride(3)),
        grad_q_(t.grad_q), grad_a_(t.grad_a), hidden_(t.hidden), v_b_(t.v_b.data_ptr<T>()), gate_(t.gate.data_ptr<T>()),
        grad_gate_(t.grad_gate.defined() ? t.grad_gate.data_ptr<T>() : nullptr),
        x_(p.heads * kBlock * 2 * p.head_dim), scaled_g_(p.heads * kBlock * k.dp), dout_(kBlock * k.dcp),
        dpre_(kBlock * k.dbp), dcat_(kBlock * 2 * k.dp), beta_(kBlock * p.heads), de_(kBlock * p.heads) {}

  void run(const Block& blk, const GradientSums<T>& sums) {
    const int64_t H = p_.heads;
    for (int64_t h = 0; h < H; ++h) gate_gradients(blk, h, sums);
    for (int64_t r = 0; r < blk.rows; ++r) softmax_over_heads_backward(&beta_[r * H], &de_[r * H], H);
    for (int64_t h = 0; h < H; ++h) input_gradients(blk, h, sums);
  }

 private:
  // Head h: gathers [q_h | a_h]; beta_h g_h for a's gradient; dL/dbeta_h into de_; dU_c_h.
  void gate_gradients(const Block& blk, int64_t h, const GradientSums<T>& sums) {
    const int64_t H = p_.heads, D = p_.head_dim, Dc = p_.value_dim, x_ld = 2 * D;
    T* x = x_.data() + h * kBlock * x_ld;
    T* g = scaled_g_.data() + h * kBlock * k_.dp;
    gather_inputs(q_, a_, h, blk, D, x);
    // Without u_c, g_h is grad_out_h itself (Dc = D): its rows go straight to g.
    T* dout = p_.project_values ? dout_.data() : g;
    const int64_t dout_ld = p_.project_values ? k_.dcp : k_.dp;
    for (int64_t r = 0; r < blk.rows; ++r) {
      copy_strided_row(grad_out_(blk.sentence(r), h, blk.step(r)), out_step_, Dc, dout + r * dout_ld);
    }
    if (p_.project_values) {
      product(dout, dout_ld, blk.rows, k_.value_w.data() + h * Dc * k_.dp, k_.dp, Dc, g, k_.dp);
    }
    for (int64_t r = 0; r < blk.rows; ++r) {
      const int64_t at = head_row(blk.n0 + r, h, H, p_.query_len);
      const T beta = gate_[at];
      beta_[r * H + h] = beta;
      de_[r * H + h] = tiles::dot(g + r * k_.dp, x + r * x_ld + D, D) + (grad_gate_ ? grad_gate_[at] : T(0));
      tiles::scale_row(g + r * k_.dp, D, beta);
      if (p_.project_values) tiles::scale_row(dout + r * dout_ld, Dc, beta);
    }
    if (p_.project_values) {
      accumulate_transposed(dout, dout_ld, Dc, blk.rows, x + D, x_ld, D, sums.value + h * Dc * D);
    }
  }

  // Head h: dpre_h, then q's and a's gradients and the sums of dW_b, dU_b_h and dv_b.
  void input_gradients(const Block& blk, int64_t h, const GradientSums<T>& sums) {
    using Vec = Vectorized<T>;
    const int64_t H = p_.heads, D = p_.head_dim, Db = p_.hop_dim, x_ld = 2 * D;
    const T* x = x_.data() + h * kBlock * x_ld;
    const T* g = scaled_g_.data() + h * kBlock * k_.dp;
    for (int64_t r = 0; r < blk.rows; ++r) {
      const T* u = hidden_(blk.sentence(r), h, blk.step(r));
      T* dpre = dpre_.data() + r * k_.dbp;
      const Vec de(de_[r * H + h]), one(T(1));
      for_vectors<T>(Db, [&](int64_t c, int64_t count) {
        const Vec uc = Vec::loadu(u + c, count);
        (de * Vec::loadu(v_b_ + c, count) * (one - uc * uc)).store(dpre + c, count);
        at::vec::fmadd(de, uc, Vec::loadu(sums.v_b + c, count)).store(sums.v_b + c, count);
      });
    }
    product(dpre_.data(), k_.dbp, blk.rows, k_.input_w.data() + h * Db * 2 * k_.dp, 2 * k_.dp, Db, dcat_.data(),
            2 * k_.dp);
    for (int64_t r = 0; r < blk.rows; ++r) {
      const T* dcat = dcat_.data() + r * 2 * k_.dp;
      std::copy(dcat, dcat + D, grad_q_(blk.sentence(r), h, blk.step(r)));
      T* da = grad_a_(blk.sentence(r), h, blk.step(r));
      for_vectors<T>(D, [&](int64_t c, int64_t count) {
        (Vec::loadu(dcat + k_.dp + c, count) + Vec::loadu(g + r * k_.dp + c, count)).store(da + c, count);
      });
    }
    accumulate_transposed(dpre_.data(), k_.dbp, Db, blk.rows, x, x_ld, x_ld, sums.input + h * Db * x_ld);
  }

  const SecondHopParams& p_;
  const BackwardPacks<T>& k_;
  const Rows<T> q_, a_, grad_out_;
  const int64_t out_step_;
  const MutableRows<T> grad_q_, grad_a_;
  const Rows<T> hidden_;
  const T* v_b_;
  const T* gate_;
  const T* grad_gate_;
  std::vector<T> x_, scaled_g_, dout_, dpre_, dcat_, beta_, de_;
};

template <typename T>
void backward_typed(const SecondHopParams& p, SecondHopBackward& t) {
  const int64_t H = p.heads, D = p.head_dim, Db = p.hop_dim, Dc = p.value_dim;
  const BackwardPacks<T> packs = backward_packs<T>(p, t);
  const int64_t blocks = (p.positions() + kBlock - 1) / kBlock;
  const int64_t chunks = std::min<int64_t>(blocks, at::get_num_threads());
  // Per chunk: [dW_b share | dU_b_h] (H, Db, 2D), dU_c_h (H, Dc, D), dv_b (Db); summed in chunk order below.
  at::Tensor input_sums = at::zeros({chunks, H, Db, 2 * D}, t.q.options());
  at::Tensor value_sums = at::zeros({p.project_values ? chunks : 0, H, Dc, D}, t.q.options());
  at::Tensor v_b_sums = at::zeros({chunks, Db}, t.q.options());
  at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    BackwardBlocks<T> worker(p, t, packs);
    for (int64_t chunk = first; chunk < last; ++chunk) {
      const GradientSums<T> sums{input_sums[chunk].data_ptr<T>(),
                                 p.project_values ? value_sums[chunk].data_ptr<T>() : nullptr,
                                 v_b_sums[chunk].data_ptr<T>()};
      for (int64_t block = chunk * blocks / chunks; block < (chunk + 1) * blocks / chunks; ++block) {
        worker.run(Block{block * kBlock, std::min(kBlock, p.positions() - block * kBlock), p.query_len}, sums);
      }
    }
  });
  const at::Tensor input = input_sums.sum(0);  // (H, Db, 2D)
  t.grad_w_b.copy_(input.narrow(2, 0, D).sum(0));
  t.grad_u_b.copy_(input.narrow(2, D, D));
  if (p.project_values) t.grad_u_c.copy_(value_sums.sum(0));
  t.grad_v_b.copy_(v_b_sums.sum(0));
}

}  // namespace

void second_hop_forward(const SecondHopParams& p, SecondHopForward& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q.scalar_type(), "mma_nmt::multihop_second_hop cpu forward",
                             [&] { forward_typed<scalar_t>(p, t); });
}

void second_hop_backward(const SecondHopParams& p, SecondHopBackward& t) {
  AT_DISPATCH_FLOATING_TYPES(t.q.scalar_type(), "mma_nmt::multihop_second_hop cpu backward",
                             [&] { backward_typed<scalar_t>(p, t); });
}

}  // namespace mma_nmt::multihop::cpu::MMA_NMT_CPU_ISA
