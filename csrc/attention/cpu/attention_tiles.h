// Vectorised building blocks of the CPU attention kernels: register-blocked products on tiles, key packing, and the
// lane masks of the row-wise softmax. Included only from attention_blocks.h, inside the per-instruction-set namespace,
// so each build gets its own copy. (tile_math.h holds the simpler row-at-a-time versions that the GMM kernels use.)
//
// Every logit is alpha * (a chain of fused multiply-adds over d = 0..D-1, in order), whatever the blocking, so forward
// and backward recompute bit-identical logits and exp(logit - lse) is exactly 1 for a row with a single key.

#include "common/cpu/row_math.h"

// Register blocking of the products: rows of the output per block, and vectors per output row. With 32 vector
// registers (AVX-512) a 4 x 4 block of accumulators leaves room for the operands; with 16 (AVX2) 4 x 2.
template <typename T>
struct Blocking {
  static constexpr int64_t kVec = Vectorized<T>::size();
  static constexpr int kRows = 4;
  static constexpr int kCols = kVec * sizeof(T) >= 64 ? 4 : 2;
};

template <typename T>
inline int64_t round_up_to_vector(int64_t n) {
  constexpr int64_t V = Vectorized<T>::size();
  return (n + V - 1) / V * V;
}
template <typename T>
inline int64_t round_down_to_vector(int64_t n) {
  constexpr int64_t V = Vectorized<T>::size();
  return n / V * V;
}

// Row length of keys or values packed depth-major (depth x ld) for n keys: whole vectors, and an odd number of 64-byte
// cache lines. With a power-of-two row length (1024 floats = 4 KiB) the depth rows of one key column all fall into one
// set of the L1 cache, so a local head, which reads a few columns of every row, missed on almost every load: from
// T = 1024 on it ran 2.7x slower per query than at T = 256.
template <typename T>
inline int64_t packed_row_length(int64_t n) {
  constexpr int64_t kLine = 64 / sizeof(T);  // elements per cache line, a multiple of the vector width
  const int64_t lines = (n + kLine - 1) / kLine;
  return (lines % 2 == 0 ? lines + 1 : lines) * kLine;
}

#if defined(CPU_CAPABILITY_AVX2)
// dst (depth x 8 columns, row stride ld) = src (n <= 8 rows x depth, row stride src_stride)^T, in 8 x 8 shuffle
// transposes. With kPartial the n < 8 rows are first copied into a zero-padded block, so columns [n, 8) of dst become
// zero.
template <bool kPartial>
inline void transpose_rows_8(const float* src, int64_t src_stride, int64_t n, int64_t depth, float* dst, int64_t ld) {
  float block[8 * 8];
  int64_t d = 0;
  for (; d + 8 <= depth; d += 8) {
    if constexpr (kPartial) {
      std::fill(block + n * 8, block + 64, 0.0f);
      for (int64_t i = 0; i < n; ++i) std::copy(src + i * src_stride + d, src + i * src_stride + d + 8, block + i * 8);
      at::vec::transpose_mxn<float, 8, 8>(block, 8, dst + d * ld, ld);
    } else {
      at::vec::transpose_mxn<float, 8, 8>(src + d, src_stride, dst + d * ld, ld);
    }
  }
  for (; d < depth; ++d) {
    for (int64_t i = 0; i < n; ++i) dst[d * ld + i] = src[i * src_stride + d];
  }
}
#endif

// dst (depth x ld) = src (rows x depth, row stride src_stride)^T: keys (or values) of one head laid out depth-major so
// that a vector load reads consecutive keys. Columns [rows, round_up_to_vector(rows)) are zero: the products read whole
// vectors and never further (every tile starts on a vector boundary), so the rest of each row of dst is left as it was.
// (Zeroing up to ld and copying the last rows one float at a time cost 12-14% of the instructions at 16 keys.)
template <typename T>
void pack_transposed(const T* src, int64_t rows, int64_t depth, int64_t src_stride, T* dst, int64_t ld) {
  using Vec = Vectorized<T>;
  const int64_t full = round_down_to_vector<T>(rows);
  if (full < rows) {  // the transposes below overwrite the valid columns of this last vector
    for (int64_t d = 0; d < depth; ++d) Vec(T(0)).store(dst + d * ld + full);
  }
#if defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<T, float>) {  // AVX2 has a shuffle transpose for 8 x 8 blocks only
    int64_t r = 0;
    for (; r + 8 <= rows; r += 8) transpose_rows_8<false>(src + r * src_stride, src_stride, 8, depth, dst + r, ld);
    if (r < rows) transpose_rows_8<true>(src + r * src_stride, src_stride, rows - r, depth, dst + r, ld);
    return;
  }
#endif
  if (rows > 0 && depth > 0) {
    at::vec::transpose_mxn<T>(src, src_stride, dst, ld, static_cast<int>(rows), static_cast<int>(depth));
  }
}

// out[r][c] = alpha * sum_d rows[r][d] * cols_t[d][c] for R rows and NC vectors of columns: R * NC accumulators stay in
// registers while d runs, so every load of cols_t serves R rows.
template <typename T, int R, int NC>
inline void score_block(const T* rows, int64_t row_stride, const T* cols_t, int64_t col_stride, int64_t depth, T alpha,
                        T* out, int64_t out_stride) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  Vec acc[R][NC];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NC; ++j) acc[r][j] = Vec(T(0));
  }
  for (int64_t d = 0; d < depth; ++d) {
    Vec k[NC];
    for (int j = 0; j < NC; ++j) k[j] = Vec::loadu(cols_t + d * col_stride + j * V);
    for (int r = 0; r < R; ++r) {
      const Vec x(rows[r * row_stride + d]);
      for (int j = 0; j < NC; ++j) acc[r][j] = at::vec::fmadd(x, k[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NC; ++j) (acc[r][j] * Vec(alpha)).store(out + r * out_stride + j * V);
  }
}

// Columns [c0, c1) (vector-aligned; cols_t readable up to c1) of R rows.
template <typename T, int R>
inline void score_rows(const T* rows, int64_t row_stride, const T* cols_t, int64_t col_stride, int64_t c0, int64_t c1,
                       int64_t depth, T alpha, T* out, int64_t out_stride) {
  constexpr int64_t V = Vectorized<T>::size();
  constexpr int NC = Blocking<T>::kCols;
  int64_t c = c0;
  for (; c + NC * V <= c1; c += NC * V) {
    score_block<T, R, NC>(rows, row_stride, cols_t + c, col_stride, depth, alpha, out + c, out_stride);
  }
  if constexpr (NC > 2) {  // AVX-512: a 32-key tile (a sentence) is two vectors; one pass over the rows, not two
    for (; c + 2 * V <= c1; c += 2 * V) {
      score_block<T, R, 2>(rows, row_stride, cols_t + c, col_stride, depth, alpha, out + c, out_stride);
    }
  }
  for (; c < c1; c += V) score_block<T, R, 1>(rows, row_stride, cols_t + c, col_stride, depth, alpha, out + c, out_stride);
}

// The same for 1 <= n_rows <= Blocking::kRows rows.
template <typename T>
inline void score_group(const T* rows, int64_t row_stride, int64_t n_rows, const T* cols_t, int64_t col_stride,
                        int64_t c0, int64_t c1, int64_t depth, T alpha, T* out, int64_t out_stride) {
  static_assert(Blocking<T>::kRows == 4, "score_group dispatches on 1..4 rows");
  switch (n_rows) {
    case 4: return score_rows<T, 4>(rows, row_stride, cols_t, col_stride, c0, c1, depth, alpha, out, out_stride);
    case 3: return score_rows<T, 3>(rows, row_stride, cols_t, col_stride, c0, c1, depth, alpha, out, out_stride);
    case 2: return score_rows<T, 2>(rows, row_stride, cols_t, col_stride, c0, c1, depth, alpha, out, out_stride);
    default: return score_rows<T, 1>(rows, row_stride, cols_t, col_stride, c0, c1, depth, alpha, out, out_stride);
  }
}

// acc[x][c..] += sum_{y in [y0, y1)} w(x, y) * mat[y][c..] for X rows x and NV vectors of columns from c, where
// w(x, y) = weights[x * wx + y * wy]. With kPartial the last vector holds `tail` valid lanes; without, all V (and the
// loads carry no count test). The sum starts from zero in registers and is added to acc once at the end: loading acc
// first made GCC spill all X * NV accumulators to the stack and back around the loop (about 4 extra instructions per
// accumulator, a fifth of the work when y1 - y0 is 16).
template <typename T, int X, int NV, bool kPartial>
inline void accumulate_block(const T* weights, int64_t wx, int64_t wy, int64_t y0, int64_t y1, const T* mat,
                             int64_t mat_stride, T* acc, int64_t acc_stride, int64_t tail) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  const auto load = [tail](const T* ptr, bool last) {
    return kPartial && last ? Vec::loadu(ptr, tail) : Vec::loadu(ptr);
  };
  Vec a[X][NV];
  for (int x = 0; x < X; ++x) {
    for (int j = 0; j < NV; ++j) a[x][j] = Vec(T(0));
  }
  for (int64_t y = y0; y < y1; ++y) {
    Vec m[NV];
    for (int j = 0; j < NV; ++j) m[j] = load(mat + y * mat_stride + j * V, j + 1 == NV);
    for (int x = 0; x < X; ++x) {
      const Vec w(weights[x * wx + y * wy]);
      for (int j = 0; j < NV; ++j) a[x][j] = at::vec::fmadd(w, m[j], a[x][j]);
    }
  }
  for (int x = 0; x < X; ++x) {
    for (int j = 0; j < NV; ++j) {
      T* dst = acc + x * acc_stride + j * V;
      const Vec sum = load(dst, j + 1 == NV) + a[x][j];
      if (kPartial && j + 1 == NV) {
        sum.store(dst, tail);
      } else {
        sum.store(dst);
      }
    }
  }
}

template <typename T, int X>
inline void accumulate_rows(const T* weights, int64_t wx, int64_t wy, int64_t y0, int64_t y1, const T* mat,
                            int64_t mat_stride, int64_t width, T* acc, int64_t acc_stride) {
  constexpr int64_t V = Vectorized<T>::size();
  constexpr int NV = Blocking<T>::kCols;
  int64_t c = 0;
  for (; c + NV * V <= width; c += NV * V) {
    accumulate_block<T, X, NV, false>(weights, wx, wy, y0, y1, mat + c, mat_stride, acc + c, acc_stride, V);
  }
  if constexpr (NV > 2) {  // AVX-512: 32 columns in one pass over the weights, not two (as score_rows)
    for (; c + 2 * V <= width; c += 2 * V) {
      accumulate_block<T, X, 2, false>(weights, wx, wy, y0, y1, mat + c, mat_stride, acc + c, acc_stride, V);
    }
  }
  for (; c + V <= width; c += V) {
    accumulate_block<T, X, 1, false>(weights, wx, wy, y0, y1, mat + c, mat_stride, acc + c, acc_stride, V);
  }
  if (c < width) {
    accumulate_block<T, X, 1, true>(weights, wx, wy, y0, y1, mat + c, mat_stride, acc + c, acc_stride, width - c);
  }
}

// Row x of acc += sum_{y in [y0, y1)} W[x][y] * mat[y] (nothing for an empty interval).
template <typename T>
inline void accumulate_one_row(const T* weights, int64_t wx, int64_t wy, int64_t x, int64_t y0, int64_t y1,
                               const T* mat, int64_t mat_stride, int64_t width, T* acc, int64_t acc_stride) {
  if (y1 > y0) accumulate_rows<T, 1>(weights + x * wx, wx, wy, y0, y1, mat, mat_stride, width, acc + x * acc_stride, acc_stride);
}

// acc (nx x width) += W (nx x ny) @ mat (ny x width) with W[x][y] = weights[x * wx + y * wy]: (wx, wy) = (ld, 1) is
// W @ mat, (1, ld) is W^T @ mat. `y_range(x)` is the interval of y that row x of W may be non-zero on (the keys a query
// row sees, or the rows that see a key). A row never reads mat outside its own interval: a block of X rows runs
// together over the y that all of them see and one row at a time over the rest of each row's interval. Running the
// block over the union instead multiplied a row's zero weights by rows of mat it cannot see, and 0 * NaN is NaN: a
// NaN in a value hidden from a query row (a causal head's future key) reached that row.
template <typename T, typename YRange>
inline void accumulate_products(const T* weights, int64_t wx, int64_t wy, int64_t nx, YRange y_range, const T* mat,
                                int64_t mat_stride, int64_t width, T* acc, int64_t acc_stride) {
  constexpr int X = Blocking<T>::kRows;
  static_assert(X == 4, "accumulate_products dispatches on 1..4 rows");
  for (int64_t x = 0; x < nx; x += X) {
    const int64_t rows = std::min<int64_t>(X, nx - x);
    KeyRange own[X];
    KeyRange common{0, 0};
    for (int64_t i = 0; i < rows; ++i) {
      own[i] = y_range(x + i);
      common = i == 0 ? own[0] : KeyRange{std::max(common.begin, own[i].begin), std::min(common.end, own[i].end)};
    }
    if (common.empty()) {  // no y that every row sees: each row alone over its own interval
      for (int64_t i = 0; i < rows; ++i) {
        accumulate_one_row<T>(weights, wx, wy, x + i, own[i].begin, own[i].end, mat, mat_stride, width, acc, acc_stride);
      }
      continue;
    }
    const T* w = weights + x * wx;
    T* a = acc + x * acc_stride;
    switch (rows) {
      case 4: accumulate_rows<T, 4>(w, wx, wy, common.begin, common.end, mat, mat_stride, width, a, acc_stride); break;
      case 3: accumulate_rows<T, 3>(w, wx, wy, common.begin, common.end, mat, mat_stride, width, a, acc_stride); break;
      case 2: accumulate_rows<T, 2>(w, wx, wy, common.begin, common.end, mat, mat_stride, width, a, acc_stride); break;
      default: accumulate_rows<T, 1>(w, wx, wy, common.begin, common.end, mat, mat_stride, width, a, acc_stride); break;
    }
    for (int64_t i = 0; i < rows; ++i) {  // the parts of each row's interval before and after the common one
      accumulate_one_row<T>(weights, wx, wy, x + i, own[i].begin, common.begin, mat, mat_stride, width, acc, acc_stride);
      accumulate_one_row<T>(weights, wx, wy, x + i, common.end, own[i].end, mat, mat_stride, width, acc, acc_stride);
    }
  }
}

// Lanes of the vector at columns [c, c + V): those inside `keep` are x, the others `fill`.
template <typename T>
inline Vectorized<T> keep_lanes(const Vectorized<T>& x, int64_t c, KeyRange keep, T fill) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  if (c >= keep.begin && c + V <= keep.end) return x;
  // Lane bounds relative to c, clamped so that they are small exact integers in T.
  const T lo = T(std::max<int64_t>(keep.begin - c, -1));
  const T hi = T(std::min<int64_t>(keep.end - c, V + 1));
  const Vec lane = Vec::arange(T(0), T(1));
  return Vec::blendv(Vec(fill), x, (lane >= Vec(lo)) & (lane < Vec(hi)));
}

template <typename T>
inline void fill_zero(T* x, int64_t begin, int64_t end) {
  if (end > begin) std::fill(x + begin, x + end, T(0));
}
