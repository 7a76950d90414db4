// Second hop of multi-hop attention on the CPU (SPEC section 4): one pass over the positions, vectorised over the hop
// dimension with at::vec, the softmax over heads from the shared header. Included by head_gate_kernel_<isa>.cpp after it
// has chosen the instruction set, so every build lives in its own namespace.
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

using at::vec::Vectorized;

constexpr int64_t kPositionBlock = 64;  // positions per task; also the unit of the v_b-gradient partial sums

// v_b . tanh(a + b) over n elements.
template <typename T>
T tanh_dot(const T* a, const T* b, const T* v_b, int64_t n) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  Vec acc(T(0));
  int64_t d = 0;
  for (; d + V <= n; d += V) {
    const Vec u = (Vec::loadu(a + d) + Vec::loadu(b + d)).tanh();
    acc = at::vec::fmadd(Vec::loadu(v_b + d), u, acc);
  }
  T total = at::vec::vec_reduce_all<T>([](Vec& x, Vec& y) { return x + y; }, acc);
  return total + head_score<T, T>(a + d, b + d, v_b + d, n - d);
}

// dst[0:n] = factor * src[0:n].
template <typename T>
void scaled_copy(const T* src, T factor, T* dst, int64_t n) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  for (int64_t d = 0; d < n; d += V) {
    const int64_t count = std::min<int64_t>(V, n - d);
    (Vec::loadu(src + d, count) * Vec(factor)).store(dst + d, count);
  }
}

template <typename T>
void forward_typed(const HeadGateParams& p, HeadGateForward& t) {
  const int64_t H = p.heads, T_len = p.query_len, Db = p.hop_dim, Dc = p.value_dim;
  const T *wq = t.query_proj.data_ptr<T>(), *ua = t.head_proj.data_ptr<T>(), *uc = t.value_proj.data_ptr<T>();
  const T* v_b = t.v_b.data_ptr<T>();
  T *out = t.out.data_ptr<T>(), *gate = t.gate.data_ptr<T>();
  at::parallel_for(0, p.positions(), kPositionBlock, [&](int64_t begin, int64_t end) {
    T beta[kMaxHeads];
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = head_row(n, h, H, T_len);
        beta[h] = tanh_dot(wq + row * Db, ua + row * Db, v_b, Db);  // e_h
      }
      softmax_over_heads(beta, H);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = head_row(n, h, H, T_len);
        gate[row] = beta[h];
        scaled_copy(uc + row * Dc, beta[h], out + row * Dc, Dc);
      }
    }
  });
}

// One head of one position in backward: grad_pre = de * v_b * (1 - u^2), v_b_grad += de * u, u = tanh(a + b).
template <typename T>
void pre_activation_backward(const T* a, const T* b, const T* v_b, T de, int64_t n, T* grad_pre, T* v_b_grad) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  const Vec one(T(1)), de_vec(de);
  for (int64_t d = 0; d < n; d += V) {
    const int64_t count = std::min<int64_t>(V, n - d);
    const Vec u = (Vec::loadu(a + d, count) + Vec::loadu(b + d, count)).tanh();
    (de_vec * Vec::loadu(v_b + d, count) * (one - u * u)).store(grad_pre + d, count);
    at::vec::fmadd(de_vec, u, Vec::loadu(v_b_grad + d, count)).store(v_b_grad + d, count);
  }
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  Vec acc(T(0));
  for (int64_t c = 0; c < n; c += V) {
    const int64_t count = std::min<int64_t>(V, n - c);
    acc = at::vec::fmadd(Vec::loadu(a + c, count), Vec::loadu(b + c, count), acc);
  }
  return at::vec::vec_reduce_all<T>([](Vec& x, Vec& y) { return x + y; }, acc);
}

// Backward of positions [begin, end): owns their rows of grad_pre and grad_value_proj; adds to its own v_b partial.
template <typename T>
void backward_block(const HeadGateParams& p, const HeadGateBackward& t, int64_t begin, int64_t end, T* v_b_grad) {
  const int64_t H = p.heads, T_len = p.query_len, Db = p.hop_dim, Dc = p.value_dim;
  const T *dout = t.grad_out.data_ptr<T>(), *wq = t.query_proj.data_ptr<T>(), *ua = t.head_proj.data_ptr<T>();
  const T *uc = t.value_proj.data_ptr<T>(), *v_b = t.v_b.data_ptr<T>(), *gate = t.gate.data_ptr<T>();
  const T* dgate = t.grad_gate.defined() ? t.grad_gate.data_ptr<T>() : nullptr;
  T *dpre = t.grad_pre.data_ptr<T>(), *duc = t.grad_value_proj.data_ptr<T>();
  T beta[kMaxHeads], de[kMaxHeads];
  for (int64_t n = begin; n < end; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = head_row(n, h, H, T_len);
      beta[h] = gate[row];
      de[h] = dot(dout + row * Dc, uc + row * Dc, Dc) + (dgate ? dgate[row] : T(0));  // dL/dbeta_h
      scaled_copy(dout + row * Dc, beta[h], duc + row * Dc, Dc);
    }
    softmax_over_heads_backward(beta, de, H);  // dL/de_h
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = head_row(n, h, H, T_len);
      pre_activation_backward(wq + row * Db, ua + row * Db, v_b, de[h], Db, dpre + row * Db, v_b_grad);
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
