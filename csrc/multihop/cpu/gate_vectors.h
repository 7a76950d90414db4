// Vectorised pieces shared by the CPU kernels of the second hop (head_gate_kernel.h, second_hop_kernel.h): tanh of a
// vector, loops over whole and partial vectors, and strided row access to (B, H, T, dim) tensors. Included inside the
// per-instruction-set namespace (after ATen's vec.h), so each build gets its own copy.
#pragma once

using at::vec::Vectorized;

// tanh of a vector. double: the accurate tanh. float: from ATen's polynomial exp (exp_u20), several times faster than
// the libm-accurate tanh. Against float64 on 2e5 points of [-9, 9] its largest error is 1.1e-7 absolute, 2.2e-7
// relative (torch's float32 tanh: 3.1e-8, 5.9e-8), and 6.0e-8 on backward's 1 - tanh^2 where 3 < |x| < 6 (torch:
// 6.1e-8). Two details keep it there: 1 - 2 / (exp(2|x|) + 1) is taken of |x| and the sign restored after, since for
// x < 0 the formula subtracts a term near 2 and lost the small 1 - |tanh| (3.5e-7 error on 1 - tanh^2); below
// |x| = 0.55 an odd Taylor polynomial (9 terms; the series converges for |x| < pi/2) replaces the formula's
// cancellation near 0. Saturates to +-1 without NaN.
template <typename T>
inline Vectorized<T> tanh_vec(const Vectorized<T>& x) {
  return x.tanh();
}
template <>
inline Vectorized<float> tanh_vec(const Vectorized<float>& x) {
  using Vec = Vectorized<float>;
  const Vec one(1.0f), two(2.0f);
  const Vec magnitude = x.abs();
  const Vec far = one - two / ((magnitude * two).exp_u20() + one);
  // tanh(x) = x (1 + x^2 (-1/3 + x^2 (2/15 + ...))): the coefficients of x^1, x^3, ..., x^17
  constexpr float kTaylor[] = {1.0f, -1.0f / 3, 2.0f / 15, -17.0f / 315, 62.0f / 2835, -1382.0f / 155925,
                               21844.0f / 6081075, -929569.0f / 638512875, 6404582.0f / 10854718875};
  const Vec square = magnitude * magnitude;
  Vec series(kTaylor[8]);
  for (int k = 7; k >= 0; --k) series = at::vec::fmadd(series, square, Vec(kTaylor[k]));
  const Vec near = series * magnitude;
  const Vec t = Vec::blendv(far, near, magnitude < Vec(0.55f));
  return Vec::blendv(t, -t, x < Vec(0.0f));
}

// body(d, count) for the vectors of [0, n): full ones (count = V, a constant once inlined, so loadu and store take
// their unmasked path without a per-vector test), then one partial vector.
template <typename T, typename Body>
inline void for_vectors(int64_t n, const Body& body) {
  constexpr int64_t V = Vectorized<T>::size();
  int64_t d = 0;
  for (; d + V <= n; d += V) body(d, V);
  if (d < n) body(d, n - d);
}

template <typename T>
inline T sum_lanes(const Vectorized<T>& acc) {
  return at::vec::vec_reduce_all<T>([](Vectorized<T>& x, Vectorized<T>& y) { return x + y; }, acc);
}

// Row (b, h, t) of a (B, H, T, dim) tensor whose last dimension is contiguous; other strides are free, so the module
// can pass transposed views of batched projections without copying them, and outputs can be laid out (B, T, H, dim)
// (what merging the heads and the projection GEMMs read) behind a (B, H, T, dim) view.
template <typename T, typename Ptr = const T*>
struct Rows {
  Ptr data;
  int64_t batch_stride, head_stride, step_stride;
  explicit Rows(const at::Tensor& t)
      : data(t.data_ptr<T>()), batch_stride(t.stride(0)), head_stride(t.stride(1)), step_stride(t.stride(2)) {}
  Ptr operator()(int64_t b, int64_t h, int64_t t) const {
    return data + b * batch_stride + h * head_stride + t * step_stride;
  }
};
template <typename T>
using MutableRows = Rows<T, T*>;

// dst[0:n] = src[0], src[step], ..., src[(n - 1) * step]: a row whose last dimension may have any stride (a loss like
// out.sum() hands over an expanded, stride-0 gradient).
template <typename T>
void copy_strided_row(const T* src, int64_t step, int64_t n, T* dst) {
  if (step == 1) {
    std::copy(src, src + n, dst);
  } else {
    for (int64_t c = 0; c < n; ++c) dst[c] = src[c * step];
  }
}
