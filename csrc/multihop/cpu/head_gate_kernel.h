// Second hop of multi-hop attention on the CPU (SPEC section 4): one pass over the positions, vectorised over the
// hop dimension with at::vec, the softmax over heads from the shared header. Included by head_gate_kernel_<isa>.cpp
// after it has chosen the instruction set, so every build lives in its own namespace.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <vector>

#include "multihop/cpu/kernel_api.h"
#include "multihop/head_gate.h"

namespace mma_nmt::multihop::cpu::MMA_NMT_CPU_ISA {
namespace {

#include "multihop/cpu/gate_vectors.h"

constexpr int64_t kPositionBlock = 64;  // positions per task; also the unit of the v_b-gradient partial sums

// v_b . tanh(a + b) over n elements.
template <typename T>
T tanh_dot(const T* a, const T* b, const T* v_b, int64_t n) {
  using Vec = Vectorized<T>;
  Vec acc(T(0));
  for_vectors<T>(n, [&](int64_t d, int64_t count) {
    const Vec u = tanh_vec(Vec::loadu(a + d, count) + Vec::loadu(b + d, count));
    acc = at::vec::fmadd(Vec::loadu(v_b + d, count), u, acc);  // lanes past count load 0 from v_b
  });
  return sum_lanes(acc);
}

// dst[0:n] = factor * src[0:n].
template <typename T>
void scaled_copy(const T* src, T factor, T* dst, int64_t n) {
  using Vec = Vectorized<T>;
  const Vec f(factor);
  for_vectors<T>(n, [&](int64_t d, int64_t count) { (Vec::loadu(src + d, count) * f).store(dst + d, count); });
}

template <typename T>
void forward_typed(const HeadGateParams& p, HeadGateForward& t) {
  const int64_t H = p.heads, T_len = p.query_len, Dc = p.value_dim;
  const Rows<T> wq(t.query_proj), ua(t.head_proj), uc(t.value_proj);
  const MutableRows<T> out(t.out);
  const T* v_b = t.v_b.data_ptr<T>();
  T* gate = t.gate.data_ptr<T>();
  at::parallel_for(0, p.positions(), kPositionBlock, [&](int64_t begin, int64_t end) {
    T beta[kMaxHeads];
    for (int64_t n = begin; n < end; ++n) {
      const int64_t b = n / T_len, i = n % T_len;
      for (int64_t h = 0; h < H; ++h) beta[h] = tanh_dot(wq(b, h, i), ua(b, h, i), v_b, p.hop_dim);  // e_h
      softmax_over_heads(beta, H);
      for (int64_t h = 0; h < H; ++h) {
        gate[head_row(n, h, H, T_len)] = beta[h];
        scaled_copy(uc(b, h, i), beta[h], out(b, h, i), Dc);
      }
    }
  });
}

// One head of one position in backward: grad_pre = de * v_b * (1 - u^2), v_b_grad += de * u, u = tanh(a + b).
template <typename T>
void pre_activation_backward(const T* a, const T* b, const T* v_b, T de, int64_t n, T* grad_pre, T* v_b_grad) {
  using Vec = Vectorized<T>;
  const Vec one(T(1)), de_vec(de);
  for_vectors<T>(n, [&](int64_t d, int64_t count) {
    const Vec u = tanh_vec(Vec::loadu(a + d, count) + Vec::loadu(b + d, count));
    (de_vec * Vec::loadu(v_b + d, count) * (one - u * u)).store(grad_pre + d, count);
    at::vec::fmadd(de_vec, u, Vec::loadu(v_b_grad + d, count)).store(v_b_grad + d, count);
  });
}

// One pass over a head's grad_out row g: dst = factor * g (the value projection's gradient), returns g . v.
template <typename T>
T dot_and_scaled_copy(const T* g, const T* v, T factor, T* dst, int64_t n) {
  using Vec = Vectorized<T>;
  const Vec f(factor);
  Vec acc(T(0));
  for_vectors<T>(n, [&](int64_t c, int64_t count) {
    const Vec x = Vec::loadu(g + c, count);
    acc = at::vec::fmadd(x, Vec::loadu(v + c, count), acc);
    (x * f).store(dst + c, count);
  });
  return sum_lanes(acc);
}

// Rows of grad_out, whose last dimension may have any stride: a row with a non-unit stride is gathered into a scratch
// row instead of copying the whole tensor first, and gathered once while consecutive rows share an address (a loss like
// out.sum() hands over an expanded gradient: one stride-0 row everywhere).
template <typename T>
class GradRows {
 public:
  GradRows(const at::Tensor& grad, int64_t n)
      : rows_(grad), step_(grad.stride(3)), n_(n), scratch_(step_ == 1 ? 0 : n) {}
  const T* operator()(int64_t b, int64_t h, int64_t t) {
    const T* row = rows_(b, h, t);
    if (step_ == 1) return row;
    if (row != gathered_from_) {
      copy_strided_row(row, step_, n_, scratch_.data());
      gathered_from_ = row;
    }
    return scratch_.data();
  }

 private:
  Rows<T> rows_;
  int64_t step_, n_;
  std::vector<T> scratch_;
  const T* gathered_from_ = nullptr;
};

// Backward of positions [begin, end): owns their rows of grad_pre and grad_value_proj; adds to its own v_b partial.
template <typename T>
void backward_block(const HeadGateParams& p, const HeadGateBackward& t, int64_t begin, int64_t end, T* v_b_grad) {
  const int64_t H = p.heads, T_len = p.query_len, Db = p.hop_dim, Dc = p.value_dim;
  const Rows<T> wq(t.query_proj), ua(t.head_proj), uc(t.value_proj);
  GradRows<T> dout(t.grad_out, Dc);
  const MutableRows<T> dpre(t.grad_pre), duc(t.grad_value_proj);
  const T *v_b = t.v_b.data_ptr<T>(), *gate = t.gate.data_ptr<T>();
  const T* dgate = t.grad_gate.defined() ? t.grad_gate.data_ptr<T>() : nullptr;
  T beta[kMaxHeads], de[kMaxHeads];
  for (int64_t n = begin; n < end; ++n) {
    const int64_t b = n / T_len, i = n % T_len;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = head_row(n, h, H, T_len);
      const T* g = dout(b, h, i);
      beta[h] = gate[row];
      // dL/dbeta_h, and the value projection's gradient beta_h * grad_out
      de[h] = dot_and_scaled_copy(g, uc(b, h, i), beta[h], duc(b, h, i), Dc) + (dgate ? dgate[row] : T(0));
    }
    softmax_over_heads_backward(beta, de, H);  // dL/de_h
    for (int64_t h = 0; h < H; ++h) {
      pre_activation_backward(wq(b, h, i), ua(b, h, i), v_b, de[h], Db, dpre(b, h, i), v_b_grad);
    }
  }
}

template <typename T>
void backward_typed(const HeadGateParams& p, HeadGateBackward& t) {
  const int64_t blocks = (p.positions() + kPositionBlock - 1) / kPositionBlock;
  // One v_b-gradient partial per block of positions, summed in a fixed order: deterministic for any thread count.
  at::Tensor partials = at::zeros({blocks, p.hop_dim}, t.v_b.options());
  T* part = partials.data_ptr<T>();
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      const int64_t begin = blk * kPositionBlock, end = std::min(p.positions(), begin + kPositionBlock);
      backward_block<T>(p, t, begin, end, part + blk * p.hop_dim);
    }
  });
  t.grad_v_b.copy_(partials.sum(0));
}

}  // namespace

void head_gate_forward(const HeadGateParams& p, HeadGateForward& t) {
  AT_DISPATCH_FLOATING_TYPES(t.query_proj.scalar_type(), "mma_nmt::multihop_gate cpu forward",
                             [&] { forward_typed<scalar_t>(p, t); });
}

void head_gate_backward(const HeadGateParams& p, HeadGateBackward& t) {
  AT_DISPATCH_FLOATING_TYPES(t.query_proj.scalar_type(), "mma_nmt::multihop_gate cpu backward",
                             [&] { backward_typed<scalar_t>(p, t); });
}

}  // namespace mma_nmt::multihop::cpu::MMA_NMT_CPU_ISA
