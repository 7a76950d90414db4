// Vectorised row helpers shared by the CPU kernels' building blocks (attention_tiles.h for the attention kernels,
// tile_math.h for the GMM kernels). Included inside the per-instruction-set namespace, so each build gets its own copy;
// the x86 intrinsics come with ATen's vec.h, which every kernel includes first.
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

// out[0:n] = x[0:n] * factor (out may be x). Whole vectors first, then one partial vector: a count test on every
// vector cost twice the instructions of the multiply at n = 64.
template <typename T>
inline void scale_row_to(const T* x, int64_t n, T factor, T* out) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  const Vec f(factor);
  int64_t c = 0;
  for (; c + V <= n; c += V) (Vec::loadu(x + c) * f).store(out + c);
  if (c < n) (Vec::loadu(x + c, n - c) * f).store(out + c, n - c);
}

// x[0:n] *= factor.
template <typename T>
inline void scale_row(T* x, int64_t n, T factor) {
  scale_row_to(x, n, factor, x);
}

// sum_c a[c] * b[c], accumulated in one vector in the order of c (whole vectors, then the zero-padded last one).
template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  Vec acc(T(0));
  int64_t c = 0;
  for (; c + V <= n; c += V) acc = at::vec::fmadd(Vec::loadu(a + c), Vec::loadu(b + c), acc);
  if (c < n) acc = at::vec::fmadd(Vec::loadu(a + c, n - c), Vec::loadu(b + c, n - c), acc);
  return at::vec::vec_reduce_all<T>([](Vec& x, Vec& y) { return x + y; }, acc);
}

// x[0:n] = 0 in vector stores. GCC would turn this loop (and std::fill) into memset, which for 2 KiB and more runs
// `rep stosb`: about as fast as the stores, but callgrind counts it as one instruction per byte, so that a 4 KiB fill
// (one block's accumulators) weighed as much as the whole score product of a 16-key head. Kept a loop so that the
// instruction counts stay a measure of the work.
#if defined(__GNUC__) && !defined(__clang__)
#define MMA_NMT_NO_MEMSET __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define MMA_NMT_NO_MEMSET
#endif
template <typename T>
MMA_NMT_NO_MEMSET inline void store_zeros(T* x, int64_t n) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  int64_t c = 0;
  for (; c + V <= n; c += V) Vec(T(0)).store(x + c);
  if (c < n) Vec(T(0)).store(x + c, n - c);
}

// dst[0:n] = src[0:n] with non-temporal stores where the instruction set has them (x86: whole 16-byte pieces once dst
// is 16-byte aligned). A plain store that misses the cache first reads the line it is about to overwrite from memory;
// these do not, which pays for outputs much larger than the cache that are not read again right away. The caller
// fences (stream_fence) before other threads may read dst.
template <typename T>
inline void stream_copy(const T* src, int64_t n, T* dst) {
  int64_t c = 0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    constexpr int64_t kPerStore = 16 / sizeof(T);
    for (; c < n && reinterpret_cast<uintptr_t>(dst + c) % 16 != 0; ++c) dst[c] = src[c];
    for (; c + kPerStore <= n; c += kPerStore) {
      if constexpr (std::is_same_v<T, float>) {
        _mm_stream_ps(dst + c, _mm_loadu_ps(src + c));
      } else {
        _mm_stream_pd(dst + c, _mm_loadu_pd(src + c));
      }
    }
  }
#endif
  std::copy(src + c, src + n, dst + c);
}

// Orders the non-temporal stores before what follows (they are weakly ordered on x86).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}
