// Vectorised building blocks of the GMM CPU kernels: small dense products on tiles and row-wise softmax pieces (the
// attention kernels use the register-blocked versions of attention_tiles.h). Included only from gmm_kernel.h, inside
// the per-instruction-set namespace, so each build gets its own copy.

#include "common/cpu/row_math.h"

// out[r][c] = alpha * sum_d rows[r][d] * cols_t[d][c] for R rows at once: 2*R vector accumulators stay in registers.
template <typename T, int R>
inline void product_rows(const T* rows, int64_t row_stride, const T* cols_t, int64_t col_stride, int64_t n_cols,
                         int64_t depth, T alpha, T* out, int64_t out_stride) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  int64_t c = 0;
  for (; c + 2 * V <= n_cols; c += 2 * V) {
    Vec acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = Vec(T(0));
    for (int64_t d = 0; d < depth; ++d) {
      const T* col = cols_t + d * col_stride + c;
      const Vec k0 = Vec::loadu(col);
      const Vec k1 = Vec::loadu(col + V);
      for (int r = 0; r < R; ++r) {
        const Vec x(rows[r * row_stride + d]);
        acc0[r] = at::vec::fmadd(x, k0, acc0[r]);
        acc1[r] = at::vec::fmadd(x, k1, acc1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      (acc0[r] * Vec(alpha)).store(out + r * out_stride + c);
      (acc1[r] * Vec(alpha)).store(out + r * out_stride + c + V);
    }
  }
  for (; c < n_cols; c += V) {
    const int64_t count = std::min<int64_t>(V, n_cols - c);
    Vec acc[R];
    for (int r = 0; r < R; ++r) acc[r] = Vec(T(0));
    for (int64_t d = 0; d < depth; ++d) {
      const Vec k0 = Vec::loadu(cols_t + d * col_stride + c, count);
      for (int r = 0; r < R; ++r) acc[r] = at::vec::fmadd(Vec(rows[r * row_stride + d]), k0, acc[r]);
    }
    for (int r = 0; r < R; ++r) (acc[r] * Vec(alpha)).store(out + r * out_stride + c, count);
  }
}

// out (n_rows x n_cols) = alpha * rows (n_rows x depth) @ cols_t (depth x n_cols), cols_t stored depth-major.
template <typename T>
inline void tile_product(const T* rows, int64_t row_stride, int64_t n_rows, const T* cols_t, int64_t col_stride,
                         int64_t n_cols, int64_t depth, T alpha, T* out, int64_t out_stride) {
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    product_rows<T, 4>(rows + r * row_stride, row_stride, cols_t, col_stride, n_cols, depth, alpha,
                       out + r * out_stride, out_stride);
  }
  for (; r < n_rows; ++r) {
    product_rows<T, 1>(rows + r * row_stride, row_stride, cols_t, col_stride, n_cols, depth, alpha,
                       out + r * out_stride, out_stride);
  }
}

// acc[x][:] += sum_y w(x, y) * mat[y][:] with w(x, y) = weights[x * wx + y * wy]. With (wx, wy) = (ld, 1) this is
// acc += W @ mat; with (1, ld) it is acc += W^T @ mat. Four vectors of each acc row stay in registers over the y loop.
// With `first`, acc is written, not read (acc = W @ mat: no zeroing pass before the first product).
template <typename T>
inline void accumulate_products(const T* weights, int64_t wx, int64_t wy, int64_t nx, int64_t ny, const T* mat,
                                int64_t mat_stride, int64_t width, T* acc, int64_t acc_stride, bool first = false) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  for (int64_t x = 0; x < nx; ++x) {
    T* acc_row = acc + x * acc_stride;
    const T* w_row = weights + x * wx;
    int64_t c = 0;
    for (; c + 4 * V <= width; c += 4 * V) {
      Vec a0(T(0)), a1(T(0)), a2(T(0)), a3(T(0));
      if (!first) {
        a0 = Vec::loadu(acc_row + c), a1 = Vec::loadu(acc_row + c + V);
        a2 = Vec::loadu(acc_row + c + 2 * V), a3 = Vec::loadu(acc_row + c + 3 * V);
      }
      for (int64_t y = 0; y < ny; ++y) {
        const Vec w(w_row[y * wy]);
        const T* m = mat + y * mat_stride + c;
        a0 = at::vec::fmadd(w, Vec::loadu(m), a0);
        a1 = at::vec::fmadd(w, Vec::loadu(m + V), a1);
        a2 = at::vec::fmadd(w, Vec::loadu(m + 2 * V), a2);
        a3 = at::vec::fmadd(w, Vec::loadu(m + 3 * V), a3);
      }
      a0.store(acc_row + c);
      a1.store(acc_row + c + V);
      a2.store(acc_row + c + 2 * V);
      a3.store(acc_row + c + 3 * V);
    }
    for (; c < width; c += V) {
      const int64_t count = std::min<int64_t>(V, width - c);
      Vec a = first ? Vec(T(0)) : Vec::loadu(acc_row + c, count);
      for (int64_t y = 0; y < ny; ++y) {
        a = at::vec::fmadd(Vec(w_row[y * wy]), Vec::loadu(mat + y * mat_stride + c, count), a);
      }
      a.store(acc_row + c, count);
    }
  }
}

template <typename T>
inline T row_max(const T* x, int64_t n) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  T result = negative_infinity<T>();
  int64_t c = 0;
  if (n >= V) {
    Vec m = Vec::loadu(x);
    for (c = V; c + V <= n; c += V) m = at::vec::maximum(m, Vec::loadu(x + c));
    result = at::vec::vec_reduce_all<T>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, m);
  }
  for (; c < n; ++c) result = std::max(result, x[c]);
  return result;
}

// x[c] = exp(x[c] - shift) in place; returns the sum of the new values.
template <typename T>
inline T exp_shifted_sum(T* x, int64_t n, T shift) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  Vec sum(T(0));
  const Vec s(shift);
  int64_t c = 0;
  for (; c + V <= n; c += V) {
    const Vec e = exp_vec(Vec::loadu(x + c) - s);
    e.store(x + c);
    sum = sum + e;
  }
  T total = at::vec::vec_reduce_all<T>([](Vec& a, Vec& b) { return a + b; }, sum);
  for (; c < n; ++c) {
    x[c] = exp_of(x[c] - shift);
    total += x[c];
  }
  return total;
}

// x[c] = exp(x[c] - shift) in place.
template <typename T>
inline void exp_shifted(T* x, int64_t n, T shift) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  int64_t c = 0;
  for (; c + V <= n; c += V) exp_vec(Vec::loadu(x + c) - Vec(shift)).store(x + c);
  for (; c < n; ++c) x[c] = exp_of(x[c] - shift);
}
