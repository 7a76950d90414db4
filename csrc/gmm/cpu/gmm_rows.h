// Vectorised row pieces of the CPU GMM kernels: the mixture over a tile of keys, the localness logit bias, and the
// moments that give the mixture parameters' gradients. Included only from gmm_kernel.h, inside the per-instruction-set
// namespace, after tile_math.h.

// Width of n keys rounded up to whole vectors. Key tiles start at multiples of kKeyTile, itself a multiple of every
// vector width, so a tile's columns [n, padded(n)) stay inside a row of padded(key_len) and are computed (on zero keys)
// and then ignored or masked: every load and store of a row is a whole vector, with no partial-vector copies.
template <typename T>
int64_t padded(int64_t n) {
  constexpr int64_t V = Vectorized<T>::size();
  return (n + V - 1) / V * V;
}

// Key positions 0, 1, ..., padded(key_len)-1 as T, so that a tile's positions load as whole vectors.
template <typename T>
std::vector<T> key_positions(int64_t key_len) {
  std::vector<T> pos(padded<T>(key_len));
  for (int64_t j = 0; j < static_cast<int64_t>(pos.size()); ++j) pos[j] = T(j);
  return pos;
}

// dst (depth, ld) = src (n, depth; rows src_stride apart) transposed, for the first n columns; columns [n, padded(n))
// are zero.
// One head's keys (or values) at a time, into a task's scratch: cheaper than a transposed copy of the whole tensor.
template <typename T>
void transpose_padded(const T* src, int64_t src_stride, int64_t n, int64_t depth, T* dst, int64_t ld) {
  const int64_t width = padded<T>(n);
  constexpr int64_t B = 8;  // ATen's 8 x 8 register transpose (AVX2 float; a scalar loop for other types and builds)
  int64_t j = 0;
  for (; j + B <= n; j += B) {
    int64_t d = 0;
    for (; d + B <= depth; d += B) {
      at::vec::transpose_mxn<T, B, B>(src + j * src_stride + d, src_stride, dst + d * ld + j, ld);
    }
    for (; d < depth; ++d) {
      for (int64_t x = j; x < j + B; ++x) dst[d * ld + x] = src[x * src_stride + d];
    }
  }
  if (j < n && j + B <= width) {
    // The last n - j < B keys, with zero keys after them up to B: each B x B block goes through a zero-padded copy, so
    // that the tail columns and the zeros past them are written by the register transpose, not by depth strided scalar
    // stores per column (with source lengths in [L/2, L] most heads end here; at L = 16 the scalar loops were half of
    // every transpose).
    T block[B * B] = {};
    const int64_t rows = n - j;
    int64_t d = 0;
    for (; d + B <= depth; d += B) {
      for (int64_t x = 0; x < rows; ++x) {
        std::copy(src + (j + x) * src_stride + d, src + (j + x) * src_stride + d + B, block + x * B);
      }
      at::vec::transpose_mxn<T, B, B>(block, B, dst + d * ld + j, ld);
    }
    for (; d < depth; ++d) {
      for (int64_t x = 0; x < B; ++x) dst[d * ld + j + x] = x < rows ? src[(j + x) * src_stride + d] : T(0);
    }
    j += B;
  }
  for (; j < n; ++j) {
    const T* row = src + j * src_stride;
    for (int64_t d = 0; d < depth; ++d) dst[d * ld + j] = row[d];
  }
  for (; j < width; ++j) {  // at most a vector's width of columns: strided stores, not a memset per row
    for (int64_t d = 0; d < depth; ++d) dst[d * ld + j] = T(0);
  }
}

// x[c] = value for c in [n, padded(n)): the tail of a row's last vector.
template <typename T>
void fill_tail(T* x, int64_t n, T value) {
  for (int64_t c = n; c < padded<T>(n); ++c) x[c] = value;
}

// Factor turning the accumulated u_j into beta_j: 1 / sum over the sentence in strict mode (0 for an empty one), else 1.
template <typename T>
T beta_scale(const GmmParams& p, T mass) {
  if (p.normalization != kStrict) return T(1);
  return mass > T(0) ? T(1) / mass : T(0);
}

// Per-row constants of one block of query rows.
template <typename T>
struct BlockSetup {
  std::vector<Component<T>> comps;  // (kQueryBlock, K)
  std::vector<T> log_sigma;         // (kQueryBlock * K) padded to whole vectors: log of the floored sigmas
  T shift[kQueryBlock];             // strict-mode shift of each row (gmm_math.h), else 0
  T beta_scale[kQueryBlock];        // set when the row's mass is known
  LocalBiasRow<T> local[kQueryBlock];

  explicit BlockSetup(int64_t components)
      : comps(kQueryBlock * components), log_sigma(padded<T>(kQueryBlock * components), T(1)) {}

  // Pointers are the (sentence, head) slices: omega/mu/sigma (T, K), center/width (T,) or null.
  void load(const GmmParams& p, const T* omega, const T* mu, const T* sigma, const T* center, const T* width,
            int64_t first_row, int64_t n_rows, int64_t n_keys) {
    using Vec = Vectorized<T>;
    const int64_t K = p.components;
    const T floor = T(p.sigma_floor);
    if (p.normalization != kUnnormalised) {  // the logs of the block's sigmas at once (scalar logs were most of this)
      const T* first = sigma + first_row * K;
      for (int64_t x = 0; x < n_rows * K; ++x) log_sigma[x] = floored(first[x], floor);
      for (int64_t x = 0; x < n_rows * K; x += Vec::size()) Vec::loadu(&log_sigma[x]).log().store(&log_sigma[x]);
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t row = (first_row + r) * K;
      Component<T>* c = comps.data() + r * K;
      for (int64_t k = 0; k < K; ++k) {
        c[k] = make_component_from_log<T>(omega[row + k], mu[row + k], sigma[row + k], floor, p.normalization,
                                          log_sigma[r * K + k]);
      }
      shift[r] = (p.normalization == kStrict && n_keys > 0) ? strict_shift(c, K, n_keys) : T(0);
      if (shift[r] != T(0)) apply_shift(c, K, shift[r]);
      if (center != nullptr) local[r] = make_local_bias<T>(center[first_row + r], width[first_row + r], floor);
    }
  }
};

// out[c] = u at positions pos[0..n) = sum_k omega_k exp(a_k - (pos[c] - mu_k)^2 c_k), and out[c] = 0 for c in
// [n, padded(n)) (pos must hold padded(n) positions). Returns the sum of out. Each vector of out is summed over the
// components in registers and stored once.
template <typename T>
T mixture_row(const Component<T>* comps, int64_t K, const T* pos, int64_t n, T* out) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  Vec total(T(0));
  for (int64_t c = 0; c < n; c += V) {
    const Vec position = Vec::loadu(pos + c);
    Vec u(T(0));
    for (int64_t k = 0; k < K; ++k) {
      const Vec d = position - Vec(comps[k].mu);
      const Vec e = exp_vec(Vec(comps[k].log_coeff) - d * d * Vec(comps[k].inv_2var));
      u = at::vec::fmadd(Vec(comps[k].omega), e, u);
    }
    if (c + V > n) u = Vec::set(Vec(T(0)), u, n - c);  // the first n - c lanes of u, zeros after
    u.store(out + c);
    total = total + u;
  }
  return at::vec::vec_reduce_all<T>([](Vec& a, Vec& b) { return a + b; }, total);
}

// acc_a[x][:] += sum_y wa[x][y] mat[y][:] and acc_b[x][:] += sum_y wb[x][y] mat[y][:] (weights with row stride ld,
// mat rows mat_stride apart, acc rows `width` apart): tile_math's accumulate_products for two weight tiles over the
// same values, which loads each vector of mat once for both (the forward's alpha v and beta v). With `first`, acc_a
// and acc_b are written, not read (their previous contents are ignored: no zeroing pass before a sentence's first key
// tile).
template <typename T>
void accumulate_pair(const T* wa, const T* wb, int64_t ld, int64_t nx, int64_t ny, const T* mat, int64_t mat_stride,
                     int64_t width, T* acc_a, T* acc_b, bool first) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  for (int64_t x = 0; x < nx; ++x) {
    T* a_row = acc_a + x * width;
    T* b_row = acc_b + x * width;
    const T* wa_row = wa + x * ld;
    const T* wb_row = wb + x * ld;
    int64_t c = 0;
    for (; c + 4 * V <= width; c += 4 * V) {
      Vec a0(T(0)), a1(T(0)), a2(T(0)), a3(T(0)), b0(T(0)), b1(T(0)), b2(T(0)), b3(T(0));
      if (!first) {
        a0 = Vec::loadu(a_row + c), a1 = Vec::loadu(a_row + c + V);
        a2 = Vec::loadu(a_row + c + 2 * V), a3 = Vec::loadu(a_row + c + 3 * V);
        b0 = Vec::loadu(b_row + c), b1 = Vec::loadu(b_row + c + V);
        b2 = Vec::loadu(b_row + c + 2 * V), b3 = Vec::loadu(b_row + c + 3 * V);
      }
      for (int64_t y = 0; y < ny; ++y) {
        const T* m = mat + y * mat_stride + c;
        const Vec m0 = Vec::loadu(m), m1 = Vec::loadu(m + V), m2 = Vec::loadu(m + 2 * V), m3 = Vec::loadu(m + 3 * V);
        const Vec wa_y(wa_row[y]), wb_y(wb_row[y]);
        a0 = at::vec::fmadd(wa_y, m0, a0);
        a1 = at::vec::fmadd(wa_y, m1, a1);
        a2 = at::vec::fmadd(wa_y, m2, a2);
        a3 = at::vec::fmadd(wa_y, m3, a3);
        b0 = at::vec::fmadd(wb_y, m0, b0);
        b1 = at::vec::fmadd(wb_y, m1, b1);
        b2 = at::vec::fmadd(wb_y, m2, b2);
        b3 = at::vec::fmadd(wb_y, m3, b3);
      }
      a0.store(a_row + c);
      a1.store(a_row + c + V);
      a2.store(a_row + c + 2 * V);
      a3.store(a_row + c + 3 * V);
      b0.store(b_row + c);
      b1.store(b_row + c + V);
      b2.store(b_row + c + 2 * V);
      b3.store(b_row + c + 3 * V);
    }
    for (; c < width; c += V) {
      const int64_t count = std::min<int64_t>(V, width - c);
      Vec a = first ? Vec(T(0)) : Vec::loadu(a_row + c, count), b = first ? Vec(T(0)) : Vec::loadu(b_row + c, count);
      for (int64_t y = 0; y < ny; ++y) {
        const Vec m = Vec::loadu(mat + y * mat_stride + c, count);
        a = at::vec::fmadd(Vec(wa_row[y]), m, a);
        b = at::vec::fmadd(Vec(wb_row[y]), m, b);
      }
      a.store(a_row + c, count);
      b.store(b_row + c, count);
    }
  }
}

// s[c] += -(pos[c] - center)^2 / (2 width^2): the localness-Gaussian logit bias.
template <typename T>
void add_local_bias(const LocalBiasRow<T>& r, const T* pos, int64_t n, T* s) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  const Vec center(r.center), inv(r.inv_2var);
  for (int64_t c = 0; c < n; c += V) {
    const int64_t count = std::min<int64_t>(V, n - c);
    const Vec d = Vec::loadu(pos + c, count) - center;
    (Vec::loadu(s + c, count) - d * d * inv).store(s + c, count);
  }
}

// Sums over positions of x[c] d^1 and x[c] d^2 with d = pos[c] - center, added to m[0], m[1].
template <typename T>
void add_centered_moments(const T* x, const T* pos, int64_t n, T center, T* m) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  Vec m1(T(0)), m2(T(0));
  for (int64_t c = 0; c < n; c += V) {
    const int64_t count = std::min<int64_t>(V, n - c);
    const Vec d = Vec::loadu(pos + c, count) - Vec(center);
    const Vec xd = Vec::loadu(x + c, count) * d;
    m1 = m1 + xd;
    m2 = at::vec::fmadd(xd, d, m2);
  }
  auto sum = [](Vec& a, Vec& b) { return a + b; };
  m[0] += at::vec::vec_reduce_all<T>(sum, m1);
  m[1] += at::vec::vec_reduce_all<T>(sum, m2);
}

// For one row and tile: with w[c] = dL/du at pos[c], adds component k's moments (m0, m1, m2 of gmm_math.h) to
// moments[3k..3k+2], and adds `beta_factor` * u (the row's beta, scaled) to gamma[c]. Works on padded(n) columns (pos,
// w and gamma hold that many); the columns from n on are left out of the moments (their term may overflow: in strict
// mode a narrow component just past the last real key has a huge coefficient) and get unspecified gamma.
template <typename T>
void mixture_backward_row(const Component<T>* comps, int64_t K, const T* pos, int64_t n, const T* w, T beta_factor,
                          T* moments, T* gamma) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  auto sum = [](Vec& a, Vec& b) { return a + b; };
  for (int64_t k = 0; k < K; ++k) {
    const Vec mu(comps[k].mu), inv(comps[k].inv_2var), a(comps[k].log_coeff);
    const Vec to_gamma(beta_factor * comps[k].omega);
    Vec m0(T(0)), m1(T(0)), m2(T(0));
    for (int64_t c = 0; c < n; c += V) {
      const Vec d = Vec::loadu(pos + c) - mu;
      const Vec e = exp_vec(a - d * d * inv);
      Vec we = Vec::loadu(w + c) * e;
      if (c + V > n) we = Vec::set(Vec(T(0)), we, n - c);
      m0 = m0 + we;
      const Vec wed = we * d;
      m1 = m1 + wed;
      m2 = at::vec::fmadd(wed, d, m2);
      at::vec::fmadd(to_gamma, e, Vec::loadu(gamma + c)).store(gamma + c);
    }
    moments[3 * k] += at::vec::vec_reduce_all<T>(sum, m0);
    moments[3 * k + 1] += at::vec::vec_reduce_all<T>(sum, m1);
    moments[3 * k + 2] += at::vec::vec_reduce_all<T>(sum, m2);
  }
}
