// Vectorised row helpers shared by the CPU kernels' building blocks (attention_tiles.h for the attention kernels,
// tile_math.h for the GMM kernels). Included inside the per-instruction-set namespace, so each build gets its own copy.
#pragma once

using at::vec::Vectorized;

template <typename T>
inline Vectorized<T> exp_vec(const Vectorized<T>& x) {
  return x.exp();
}
template <>
inline Vectorized<float> exp_vec(const Vectorized<float>& x) {
  return x.exp_u20();  // the polynomial exp that ATen's own CPU flash attention uses; exp_u20(-inf) = 0
}

// x[0:n] *= factor.
template <typename T>
inline void scale_row(T* x, int64_t n, T factor) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  for (int64_t c = 0; c < n; c += V) {
    const int64_t count = std::min<int64_t>(V, n - c);
    (Vec::loadu(x + c, count) * Vec(factor)).store(x + c, count);
  }
}

// sum_c a[c] * b[c].
template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  Vec acc(T(0));
  for (int64_t c = 0; c < n; c += V) {
    const int64_t count = std::min<int64_t>(V, n - c);
    acc = at::vec::fmadd(Vec::loadu(a + c, count), Vec::loadu(b + c, count), acc);
  }
  return at::vec::vec_reduce_all<T>([](Vec& x, Vec& y) { return x + y; }, acc);
}
