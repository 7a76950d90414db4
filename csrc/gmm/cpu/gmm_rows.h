// Vectorised row pieces of the CPU GMM kernels: the mixture over a tile of keys, the localness logit bias, and the
// moments that give the mixture parameters' gradients. Included only from gmm_kernel.h, inside the per-instruction-set
// namespace, after tile_math.h.

// Key positions 0, 1, ..., S-1 as T, so that a tile's positions load as a vector.
template <typename T>
std::vector<T> key_positions(int64_t key_len) {
  std::vector<T> pos(key_len);
  for (int64_t j = 0; j < key_len; ++j) pos[j] = T(j);
  return pos;
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
  T shift[kQueryBlock];             // strict-mode shift of each row (gmm_math.h), else 0
  T beta_scale[kQueryBlock];        // set when the row's mass is known
  LocalBiasRow<T> local[kQueryBlock];

  explicit BlockSetup(int64_t components) : comps(kQueryBlock * components) {}

  // Pointers are the (sentence, head) slices: omega/mu/sigma (T, K), center/width (T,) or null.
  void load(const GmmParams& p, const T* omega, const T* mu, const T* sigma, const T* center, const T* width,
            int64_t first_row, int64_t n_rows, int64_t n_keys) {
    const int64_t K = p.components;
    const T floor = T(p.sigma_floor);
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t row = (first_row + r) * K;
      Component<T>* c = comps.data() + r * K;
      for (int64_t k = 0; k < K; ++k) {
        c[k] = make_component<T>(omega[row + k], mu[row + k], sigma[row + k], floor, p.normalization);
      }
      shift[r] = (p.normalization == kStrict && n_keys > 0) ? strict_shift(c, K, n_keys) : T(0);
      if (shift[r] != T(0)) apply_shift(c, K, shift[r]);
      if (center != nullptr) local[r] = make_local_bias<T>(center[first_row + r], width[first_row + r], floor);
    }
  }
};

// out[c] = u at positions pos[0..n) = sum_k omega_k exp(a_k - (pos[c] - mu_k)^2 c_k). Returns the sum of out.
template <typename T>
T mixture_row(const Component<T>* comps, int64_t K, const T* pos, int64_t n, T* out) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  std::fill(out, out + n, T(0));
  for (int64_t k = 0; k < K; ++k) {
    const Vec mu(comps[k].mu), inv(comps[k].inv_2var), a(comps[k].log_coeff), omega(comps[k].omega);
    for (int64_t c = 0; c < n; c += V) {
      const int64_t count = std::min<int64_t>(V, n - c);
      const Vec d = Vec::loadu(pos + c, count) - mu;
      const Vec e = exp_vec(a - d * d * inv);
      at::vec::fmadd(omega, e, Vec::loadu(out + c, count)).store(out + c, count);
    }
  }
  T total = 0;
  for (int64_t c = 0; c < n; ++c) total += out[c];
  return total;
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
// moments[3k..3k+2], and adds `beta_factor` * u (the row's beta, scaled) to gamma[c].
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
      const int64_t count = std::min<int64_t>(V, n - c);
      const Vec d = Vec::loadu(pos + c, count) - mu;
      const Vec e = exp_vec(a - d * d * inv);
      const Vec we = Vec::loadu(w + c, count) * e;
      m0 = m0 + we;
      const Vec wed = we * d;
      m1 = m1 + wed;
      m2 = at::vec::fmadd(wed, d, m2);
      at::vec::fmadd(to_gamma, e, Vec::loadu(gamma + c, count)).store(gamma + c, count);
    }
    moments[3 * k] += at::vec::vec_reduce_all<T>(sum, m0);
    moments[3 * k + 1] += at::vec::vec_reduce_all<T>(sum, m1);
    moments[3 * k + 2] += at::vec::vec_reduce_all<T>(sum, m2);
  }
}
