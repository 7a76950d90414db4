// Backward of the CPU GMM kernel. Included only from gmm_kernel.h, inside the per-instruction-set namespace.
//
// With out = (1 - g) A + g B, A = sum_j alpha_j v_j, B = sum_j beta_j v_j and dv_j . dO = x_j:
//   dg = dO . (B - A),   dv_j += ((1 - g) alpha_j + g beta_j) dO,
//   d logit_j = (1 - g) alpha_j (x_j - dO . A)                       (softmax backward),
//   dL/du_j = g (x_j - [strict] dO . B) / U                          (U = 1 unless strict),
// and the mixture parameters' gradients follow from dL/du_j through gmm_math.h's component_grads.

// Pointers of one (sentence, head) slice of the backward tensors: dout, q, k, v and their gradients through their row
// strides, the others contiguous.
template <typename T>
struct BackwardHead {
  const T *dout, *q, *k, *v, *omega, *mu, *sigma, *gate, *center, *width, *lse, *log_mass, *ctx_a, *ctx_b;
  T *dq, *dk, *dv, *domega, *dmu, *dsigma, *dgate, *dcenter, *dwidth;
  int64_t dout_stride, q_stride, k_stride, v_stride, dq_stride, dk_stride, dv_stride;  // row strides
};

template <typename T>
BackwardHead<T> backward_head_slice(const GmmParams& p, const BackwardTensors& t, int64_t bh) {
  const int64_t T_len = p.query_len, Dv = p.value_dim, K = p.components, H = p.heads;
  BackwardHead<T> h;
  point_at_inputs<T>(p, t, bh, h);
  point_at_rows<T>(t.grad_out, H, bh, h.dout, h.dout_stride);
  point_at_rows<T>(t.grad_q, H, bh, h.dq, h.dq_stride);
  point_at_rows<T>(t.grad_k, H, bh, h.dk, h.dk_stride);
  point_at_rows<T>(t.grad_v, H, bh, h.dv, h.dv_stride);
  h.lse = t.lse.data_ptr<T>() + bh * T_len;
  h.log_mass = t.log_mass.data_ptr<T>() + bh * T_len;
  h.ctx_a = t.alpha_context.data_ptr<T>() + bh * T_len * Dv;
  h.ctx_b = t.beta_context.data_ptr<T>() + bh * T_len * Dv;
  h.domega = t.grad_omega.data_ptr<T>() + bh * T_len * K;
  h.dmu = t.grad_mu.data_ptr<T>() + bh * T_len * K;
  h.dsigma = t.grad_sigma.data_ptr<T>() + bh * T_len * K;
  h.dgate = t.grad_gate.data_ptr<T>() + bh * T_len;
  h.dcenter = slice_or_null<T>(t.grad_local_center, bh * T_len);
  h.dwidth = slice_or_null<T>(t.grad_local_width, bh * T_len);
  return h;
}

// Scratch space of one backward task.
template <typename T>
struct BackwardScratch {
  std::vector<T> probs, grad_logits, gamma, grad_u, delta_a, delta_b, moments, local_moments;
  std::vector<T> kt, vt;  // (D, ld) and (Dv, ld): the head's keys and values transposed, zero beyond its real keys
  int64_t ld;             // padded(key_len)
  BlockSetup<T> setup;
  BackwardScratch(const GmmParams& p)
      : probs(kQueryBlock * kKeyTile), grad_logits(kQueryBlock * kKeyTile), gamma(kQueryBlock * kKeyTile),
        grad_u(kKeyTile), delta_a(p.query_len), delta_b(p.query_len),
        moments(kQueryBlock * 3 * p.components), local_moments(kQueryBlock * 2),
        kt(p.head_dim * padded<T>(p.key_len)), vt(p.value_dim * padded<T>(p.key_len)), ld(padded<T>(p.key_len)),
        setup(p.components) {}
};

// One row of one tile. In: w.probs = logits, w.grad_logits = dO . v_j. Out: probs = alpha, grad_logits = d(q.k),
// gamma = the weights that multiply dO in dv; mixture and local moments accumulated.
// Rows are processed over padded(n) columns, whole vectors: the columns from n on hold zero keys and values, get
// probability exp(-inf) = 0, so they add nothing to d(q.k); mixture_backward_row leaves them out of the moments; their
// gamma is never read.
template <typename T>
void backward_row(const GmmParams& p, const BackwardHead<T>& h, const T* pos, int64_t i, int64_t r, int64_t n,
                  BackwardScratch<T>& w) {
  using Vec = Vectorized<T>;
  constexpr int64_t V = Vec::size();
  const int64_t K = p.components, n_pad = padded<T>(n);
  T* prob = w.probs.data() + r * kKeyTile;
  T* grad = w.grad_logits.data() + r * kKeyTile;
  T* gamma = w.gamma.data() + r * kKeyTile;
  const T g = h.gate[i], inv_u = w.setup.beta_scale[r];
  if (p.has_local_bias) add_local_bias(w.setup.local[r], pos, n_pad, prob);
  fill_tail(prob, n, negative_infinity<T>());
  exp_shifted(prob, n_pad, h.lse[i]);
  const T beta_delta = p.normalization == kStrict ? w.delta_b[i] : T(0);
  const Vec u_factor(g * inv_u), u_shift(beta_delta), one_minus_g(T(1) - g), delta_a(w.delta_a[i]);
  for (int64_t c = 0; c < n_pad; c += V) {
    const Vec x = Vec::loadu(grad + c), a = one_minus_g * Vec::loadu(prob + c);
    ((x - u_shift) * u_factor).store(w.grad_u.data() + c);
    a.store(gamma + c);
    (a * (x - delta_a)).store(grad + c);
  }
  mixture_backward_row(w.setup.comps.data() + r * K, K, pos, n, w.grad_u.data(), g * inv_u,
                       w.moments.data() + r * 3 * K, gamma);
  if (p.has_local_bias) {
    add_centered_moments(grad, pos, n_pad, w.setup.local[r].center, w.local_moments.data() + 2 * r);
  }
  scale_row(grad, n_pad, T(p.scale));
}

// Writes the gradients of the per-row inputs of a finished block.
template <typename T>
void write_row_grads(const GmmParams& p, const BackwardHead<T>& h, int64_t first_row, int64_t n_rows,
                     const BackwardScratch<T>& w) {
  const int64_t K = p.components;
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t i = first_row + r;
    for (int64_t k = 0; k < K; ++k) {
      const T* m = w.moments.data() + (r * K + k) * 3;
      const ComponentGrads<T> g = component_grads(w.setup.comps[r * K + k], m[0], m[1], m[2]);
      h.domega[i * K + k] = g.omega;
      h.dmu[i * K + k] = g.mu;
      h.dsigma[i * K + k] = g.sigma;
    }
    if (p.has_local_bias) {
      h.dcenter[i] = local_center_grad(w.setup.local[r], w.local_moments[2 * r]);
      h.dwidth[i] = local_width_grad(w.setup.local[r], w.local_moments[2 * r + 1]);
    }
  }
}

// Backward of one block of query rows over every real key; adds into dk and dv, which this task owns.
template <typename T>
void backward_block(const GmmParams& p, const BackwardHead<T>& h, const T* pos, int64_t first_row, int64_t n_rows,
                    int64_t n_keys, BackwardScratch<T>& w) {
  const int64_t D = p.head_dim, Dv = p.value_dim, K = p.components;
  w.setup.load(p, h.omega, h.mu, h.sigma, h.center, h.width, first_row, n_rows, n_keys);
  for (int64_t r = 0; r < n_rows; ++r) {
    T mass = 0;
    if (p.normalization == kStrict) {
      // The shifted mass summed again exactly as the forward did. Taking it back from the saved log_mass,
      // exp(log_mass - shift), carried log_mass's rounding, |shift| * eps relative: with a narrow component far from
      // the keys (shift ~ -1e6) beta was off by a factor of 3 in float32 (grad_v 0.3 for a weight of 1).
      for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
        const int64_t n = std::min(kKeyTile, n_keys - j0);
        mass += mixture_row(w.setup.comps.data() + r * K, K, pos + j0, n, w.gamma.data() + r * kKeyTile);
      }
    } else {
      const T log_mass = h.log_mass[first_row + r];
      mass = log_mass == negative_infinity<T>() ? T(0) : exp_of(log_mass - w.setup.shift[r]);
    }
    w.setup.beta_scale[r] = beta_scale(p, mass);
  }
  T* dq = h.dq + first_row * h.dq_stride;  // (n_rows, D): written by the first key tile, then accumulated in place
  if (n_keys == 0) {
    for (int64_t r = 0; r < n_rows; ++r) store_zeros(dq + r * h.dq_stride, D);
  }
  std::fill(w.moments.begin(), w.moments.begin() + n_rows * 3 * K, T(0));
  std::fill(w.local_moments.begin(), w.local_moments.begin() + n_rows * 2, T(0));
  const bool first_block = first_row == 0;  // it writes grad_k and grad_v rows [0, n_keys), not reads them
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, n_keys - j0), n_pad = padded<T>(n);
    const T* q_block = h.q + first_row * h.q_stride;
    const T* dout_block = h.dout + first_row * h.dout_stride;
    tile_product<T>(q_block, h.q_stride, n_rows, w.kt.data() + j0, w.ld, n_pad, D, T(p.scale), w.probs.data(),
                    kKeyTile);
    tile_product<T>(dout_block, h.dout_stride, n_rows, w.vt.data() + j0, w.ld, n_pad, Dv, T(1), w.grad_logits.data(),
                    kKeyTile);
    for (int64_t r = 0; r < n_rows; ++r) backward_row(p, h, pos + j0, first_row + r, r, n, w);
    // grad_v[j0:j0+n] (n, Dv) += gamma^T (n, n_rows) @ dO_block (n_rows, Dv)
    accumulate_products<T>(w.gamma.data(), 1, kKeyTile, n, n_rows, dout_block, h.dout_stride, Dv,
                           h.dv + j0 * h.dv_stride, h.dv_stride, first_block);
    // grad_k[j0:j0+n] (n, D) += dS^T (n, n_rows) @ q_block (n_rows, D)
    accumulate_products<T>(w.grad_logits.data(), 1, kKeyTile, n, n_rows, q_block, h.q_stride, D,
                           h.dk + j0 * h.dk_stride, h.dk_stride, first_block);
    // grad_q_block (n_rows, D) += dS (n_rows, n) @ k[j0:j0+n] (n, D)
    accumulate_products<T>(w.grad_logits.data(), kKeyTile, 1, n_rows, n, h.k + j0 * h.k_stride, h.k_stride, D, dq,
                           h.dq_stride, j0 == 0);
  }
  write_row_grads(p, h, first_row, n_rows, w);
}

template <typename T>
void backward_typed(const GmmParams& p, BackwardTensors& t) {
  const std::vector<T> pos = key_positions<T>(p.key_len);
  const int64_t* lengths = t.key_lengths.defined() ? t.key_lengths.data_ptr<int64_t>() : nullptr;
  const int64_t T_len = p.query_len, Dv = p.value_dim;
  at::parallel_for(0, p.batch * p.heads, 1, [&](int64_t begin, int64_t end) {
    BackwardScratch<T> w(p);
    for (int64_t bh = begin; bh < end; ++bh) {
      const BackwardHead<T> h = backward_head_slice<T>(p, t, bh);
      for (int64_t i = 0; i < T_len; ++i) {
        w.delta_a[i] = dot(h.dout + i * h.dout_stride, h.ctx_a + i * Dv, Dv);  // dO . A
        w.delta_b[i] = dot(h.dout + i * h.dout_stride, h.ctx_b + i * Dv, Dv);  // dO . B
        h.dgate[i] = w.delta_b[i] - w.delta_a[i];
      }
      // grad_k and grad_v come uninitialised: the first query block writes the real keys' rows; the padding rows are 0.
      const int64_t n_keys = keys_of_sentence(lengths, bh / p.heads, p.key_len);
      for (int64_t j = n_keys; j < p.key_len; ++j) {
        store_zeros(h.dk + j * h.dk_stride, p.head_dim);
        store_zeros(h.dv + j * h.dv_stride, Dv);
      }
      transpose_padded(h.k, h.k_stride, n_keys, p.head_dim, w.kt.data(), w.ld);
      transpose_padded(h.v, h.v_stride, n_keys, Dv, w.vt.data(), w.ld);
      for (int64_t first_row = 0; first_row < T_len; first_row += kQueryBlock) {
        backward_block<T>(p, h, pos.data(), first_row, std::min(kQueryBlock, T_len - first_row), n_keys, w);
      }
    }
  });
}
