// Block-per-head CUDA kernels of GMM cross-attention for decoder sizes (issue 49): a block stages the real keys and
// values of one (sentence, head) in shared memory once, and its warps take query rows with the keys in lanes (key j on
// lane j % 32), so a row's logits, mixture terms and softmax are computed side by side instead of key after key.
//   - forward: one launch, the same outputs and saved statistics as gmm_forward_kernel;
//   - backward: one launch writing dq, the mixture, gate and local-bias gradients, and per (row, key) the logit
//     gradient (times the scale) and the total weight gamma = (1 - g) alpha + g beta; the launcher's two batched GEMMs
//     turn those into dk = ds^T q and dv = gamma^T dout, so that no key is owned by two blocks (no atomics).
// The arithmetic is gmm_math.h's, as in the one-warp-per-row kernels (gmm_kernels.cuh), which serve the shapes whose
// staged keys do not fit in shared memory. Device source, included from gmm_kernels.cuh.
#pragma once

namespace mma_nmt::gmm::cuda {

constexpr int kBlockRowsPerWarp = 4;       // query rows each warp of a block takes, one after another
using gpu::staged_stride;

// Shared memory of a block: keys and values (scalar_t), then per warp a buffer of acc_t: the query row (head_dim),
// in backward the output gradient row (value_dim), two per-key rows (key_len each) and the row's components (4 each).
template <typename scalar_t, typename acc_t>
struct BlockLayout {
  int64_t key_stride, value_stride, staged_bytes, warp_floats;

  MMA_HOST_DEVICE BlockLayout(int64_t key_len, int64_t head_dim, int64_t value_dim, int64_t components,
                              bool backward)
      : key_stride(staged_stride<scalar_t>(head_dim)), value_stride(staged_stride<scalar_t>(value_dim)) {
    const int64_t staged = key_len * (key_stride + value_stride) * static_cast<int64_t>(sizeof(scalar_t));
    staged_bytes = (staged + 15) / 16 * 16;  // the acc_t buffers start aligned
    warp_floats = head_dim + (backward ? value_dim : 0) + 2 * key_len + 4 * components;
  }
  MMA_HOST_DEVICE int64_t bytes(int64_t warps) const {
    return staged_bytes + warps * warp_floats * static_cast<int64_t>(sizeof(acc_t));
  }
};

// A warp's view of its buffer.
template <typename acc_t>
struct WarpBuffers {
  acc_t *query, *dout, *first, *second;  // first/second: per key (forward: alpha, beta; backward: ds, w)
  acc_t *omega, *mu, *inv_2var, *log_coeff;  // the row's components, shift applied
};

template <typename scalar_t, typename acc_t>
__device__ WarpBuffers<acc_t> warp_buffers(unsigned char* shared, const BlockLayout<scalar_t, acc_t>& layout,
                                           const GmmArgs<scalar_t, acc_t>& a, bool backward) {
  acc_t* base = reinterpret_cast<acc_t*>(shared + layout.staged_bytes) + (threadIdx.x / kWarp) * layout.warp_floats;
  WarpBuffers<acc_t> w;
  w.query = base;
  w.dout = base + a.head_dim;
  w.first = w.dout + (backward ? a.value_dim : 0);
  w.second = w.first + a.key_len;
  w.omega = w.second + a.key_len;
  w.mu = w.omega + a.components;
  w.inv_2var = w.mu + a.components;
  w.log_coeff = w.inv_2var + a.components;
  return w;
}

// Copies the first n_keys keys and values of head bh into shared memory (all threads of the block), then waits.
template <typename scalar_t, typename acc_t>
__device__ void stage_keys_values(const GmmArgs<scalar_t, acc_t>& a, const BlockLayout<scalar_t, acc_t>& layout,
                                  int64_t bh, int64_t n_keys, scalar_t* keys, scalar_t* values) {
  const int64_t D = a.head_dim, Dv = a.value_dim;
  const scalar_t* head_keys = a.k.row_of(bh, a.heads, 0);  // rows a.k.row_stride apart
  const scalar_t* head_values = a.v.row_of(bh, a.heads, 0);
  for (int64_t e = threadIdx.x; e < n_keys * D; e += blockDim.x) {
    keys[(e / D) * layout.key_stride + e % D] = head_keys[(e / D) * a.k.row_stride + e % D];
  }
  for (int64_t e = threadIdx.x; e < n_keys * Dv; e += blockDim.x) {
    values[(e / Dv) * layout.value_stride + e % Dv] = head_values[(e / Dv) * a.v.row_stride + e % Dv];
  }
  __syncthreads();
}

// Loads query row i of head bh (row = bh * query_len + i of the per-row inputs), in backward also its output
// gradient, and its components into the warp's buffers: lane k builds component k; in strict mode the shift is the
// largest of the components' strict_shift values. Returns the shift.
template <typename scalar_t, typename acc_t>
__device__ acc_t load_row(const GmmArgs<scalar_t, acc_t>& a, const WarpBuffers<acc_t>& w, int64_t bh, int64_t i,
                          int64_t n_keys, bool backward) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = bh * a.query_len + i;
  const scalar_t* query = a.q.row_of(bh, a.heads, i);
  for (int64_t d = lane; d < a.head_dim; d += kWarp) w.query[d] = static_cast<acc_t>(query[d]);
  if (backward) {
    const scalar_t* dout = a.dout.row_of(bh, a.heads, i);
    for (int64_t d = lane; d < a.value_dim; d += kWarp) w.dout[d] = static_cast<acc_t>(dout[d]);
  }
  Component<acc_t> c{};
  acc_t best = negative_infinity<acc_t>();
  if (lane < a.components) {
    const int64_t at = row * a.components + lane;
    c = make_component<acc_t>(a.omega[at], a.mu[at], a.sigma[at], a.floor, a.normalization);
    if (a.normalization == kStrict && n_keys > 0) best = strict_shift(&c, 1, n_keys);
  }
  best = warp_max(best);
  const acc_t shift = best == negative_infinity<acc_t>() ? acc_t(0) : best;
  if (lane < a.components) {
    w.omega[lane] = c.omega;
    w.mu[lane] = c.mu;
    w.inv_2var[lane] = c.inv_2var;
    w.log_coeff[lane] = c.log_coeff - shift;
  }
  gpu::warp_sync();
  return shift;
}

// The row's mixture u_j at key position j, from the components in the warp's buffer.
template <typename acc_t>
__device__ acc_t mixture_at(const WarpBuffers<acc_t>& w, int64_t components, acc_t position) {
  acc_t total = 0;
  for (int64_t k = 0; k < components; ++k) {
    const acc_t d = position - w.mu[k];
    total += w.omega[k] * exp_of(w.log_coeff[k] - d * d * w.inv_2var[k]);
  }
  return total;
}

// Logit of key j (staged) for the warp's query row.
template <typename scalar_t, typename acc_t>
__device__ acc_t staged_logit(const GmmArgs<scalar_t, acc_t>& a, const WarpBuffers<acc_t>& w,
                              const scalar_t* key, int64_t row, int64_t j) {
  acc_t dot = 0;
  for (int64_t d = 0; d < a.head_dim; ++d) dot += w.query[d] * static_cast<acc_t>(key[d]);
  return dot * a.scale + logit_bias(a, row, acc_t(j));
}

template <typename scalar_t, typename acc_t>
__global__ void gmm_forward_block_kernel(GmmArgs<scalar_t, acc_t> a, GmmOutputs<scalar_t, acc_t> o) {
  MMA_NMT_DYNAMIC_SHARED(unsigned char, shared);
  const BlockLayout<scalar_t, acc_t> layout(a.key_len, a.head_dim, a.value_dim, a.components, false);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const int64_t bh = blockIdx.x, n_keys = keys_of_sentence(a.lengths, bh / a.heads, a.key_len), Dv = a.value_dim;
  scalar_t* keys = reinterpret_cast<scalar_t*>(shared);
  scalar_t* values = keys + a.key_len * layout.key_stride;
  stage_keys_values(a, layout, bh, n_keys, keys, values);
  const WarpBuffers<acc_t> w = warp_buffers(shared, layout, a, false);
  for (int r = 0; r < kBlockRowsPerWarp; ++r) {
    const int64_t i = (static_cast<int64_t>(blockIdx.y) * kBlockRowsPerWarp + r) * warps + warp;
    if (i >= a.query_len) break;
    const int64_t row = bh * a.query_len + i;
    const acc_t shift = load_row(a, w, bh, i, n_keys, /*backward=*/false);
    acc_t top = negative_infinity<acc_t>();
    for (int64_t j = lane; j < n_keys; j += kWarp) {
      const acc_t logit = staged_logit(a, w, keys + j * layout.key_stride, row, j);
      w.first[j] = logit;
      top = fmax(top, logit);
    }
    top = warp_max(top);
    acc_t sum = 0, mass = 0;
    for (int64_t j = lane; j < n_keys; j += kWarp) {
      const acc_t e = exp_of(w.first[j] - top), u = mixture_at(w, a.components, acc_t(j));
      w.first[j] = e;
      w.second[j] = u;
      sum += e;
      mass += u;
    }
    sum = warp_sum(sum);
    mass = warp_sum(mass);
    gpu::warp_sync();
    const acc_t inv_a = sum > acc_t(0) ? acc_t(1) / sum : acc_t(0);
    const acc_t inv_b = a.normalization == kStrict ? (mass > acc_t(0) ? acc_t(1) / mass : acc_t(0)) : acc_t(1);
    const acc_t g = a.gate[row];
    scalar_t* out_row = o.out.row_of(bh, a.heads, i);
    for (int64_t d = lane; d < Dv; d += kWarp) {
      acc_t acc_a = 0, acc_b = 0;
      for (int64_t j = 0; j < n_keys; ++j) {
        const acc_t value = static_cast<acc_t>(values[j * layout.value_stride + d]);
        acc_a += w.first[j] * value;
        acc_b += w.second[j] * value;
      }
      o.ctx_a[row * Dv + d] = acc_a * inv_a;
      o.ctx_b[row * Dv + d] = acc_b * inv_b;
      out_row[d] = static_cast<scalar_t>((acc_t(1) - g) * acc_a * inv_a + g * acc_b * inv_b);
    }
    if (lane == 0) {
      o.lse[row] = sum > acc_t(0) ? top + log_of(sum) : negative_infinity<acc_t>();
      o.log_mass[row] = mass > acc_t(0) ? shift + log_of(mass) : negative_infinity<acc_t>();
    }
    if (o.alpha != nullptr) {  // zero-filled by the launcher: padding keys keep 0
      for (int64_t j = lane; j < n_keys; j += kWarp) {
        o.alpha[row * a.key_len + j] = static_cast<scalar_t>(w.first[j] * inv_a);
        o.beta[row * a.key_len + j] = static_cast<scalar_t>(w.second[j] * inv_b);
      }
    }
    gpu::warp_sync();  // the next row overwrites the buffers
  }
}

// Per (row, key) products of the backward block kernel, (B, H, T, S) each, read by the launcher's GEMMs.
template <typename scalar_t>
struct PairGrads {
  scalar_t *ds, *gamma;  // d loss / d logit times the scale; total weight (1 - g) alpha + g beta; 0 at padding keys
  // (B H, T, D) and (B H, T, Dv), each null unless q (dout) is a head view: its rows copied there as they are read,
  // for the launcher's GEMMs (which need heads that fold into one batch dimension)
  scalar_t *q_rows, *dout_rows;
};

template <typename scalar_t, typename acc_t>
__global__ void gmm_backward_block_kernel(GmmArgs<scalar_t, acc_t> a, GmmGrads<scalar_t, acc_t> gr,
                                          PairGrads<scalar_t> pairs) {
  MMA_NMT_DYNAMIC_SHARED(unsigned char, shared);
  const BlockLayout<scalar_t, acc_t> layout(a.key_len, a.head_dim, a.value_dim, a.components, true);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const int64_t bh = blockIdx.x, n_keys = keys_of_sentence(a.lengths, bh / a.heads, a.key_len);
  const int64_t D = a.head_dim, Dv = a.value_dim, K = a.components;
  scalar_t* keys = reinterpret_cast<scalar_t*>(shared);
  scalar_t* values = keys + a.key_len * layout.key_stride;
  stage_keys_values(a, layout, bh, n_keys, keys, values);
  const WarpBuffers<acc_t> w = warp_buffers(shared, layout, a, true);
  for (int r = 0; r < kBlockRowsPerWarp; ++r) {
    const int64_t i = (static_cast<int64_t>(blockIdx.y) * kBlockRowsPerWarp + r) * warps + warp;
    if (i >= a.query_len) break;
    const int64_t row = bh * a.query_len + i;
    const acc_t shift = load_row(a, w, bh, i, n_keys, /*backward=*/true);
    // Copies for the launcher's GEMMs, exact: the buffers hold scalar_t values widened to acc_t.
    if (pairs.q_rows != nullptr) {
      for (int64_t d = lane; d < D; d += kWarp) pairs.q_rows[row * D + d] = static_cast<scalar_t>(w.query[d]);
    }
    if (pairs.dout_rows != nullptr) {
      for (int64_t d = lane; d < Dv; d += kWarp) pairs.dout_rows[row * Dv + d] = static_cast<scalar_t>(w.dout[d]);
    }
    // Row statistics, as row_statistics() of the one-warp-per-row kernel.
    acc_t delta_a = 0, delta_b = 0;
    for (int64_t d = lane; d < Dv; d += kWarp) {
      delta_a += w.dout[d] * gr.ctx_a[row * Dv + d];
      delta_b += w.dout[d] * gr.ctx_b[row * Dv + d];
    }
    delta_a = warp_sum(delta_a);
    delta_b = warp_sum(delta_b);
    const acc_t log_mass = gr.log_mass[row], lse = gr.lse[row], g = a.gate[row];
    acc_t beta_scale = acc_t(1);
    if (a.normalization == kStrict) {
      beta_scale = log_mass == negative_infinity<acc_t>() ? acc_t(0) : exp_of(shift - log_mass);
    }
    const acc_t beta_delta = a.normalization == kStrict ? delta_b : acc_t(0);
    const acc_t center = a.center.present() ? a.center[row] : acc_t(0);
    acc_t n1 = 0, n2 = 0;
    for (int64_t j = lane; j < a.key_len; j += kWarp) {
      if (j >= n_keys) {  // padding keys: no gradient reaches them
        pairs.ds[row * a.key_len + j] = scalar_t(0);
        pairs.gamma[row * a.key_len + j] = scalar_t(0);
        continue;
      }
      const acc_t p = probability_from_lse(staged_logit(a, w, keys + j * layout.key_stride, row, j), lse);
      const scalar_t* value = values + j * layout.value_stride;
      acc_t dov = 0;
      for (int64_t d = 0; d < Dv; ++d) dov += w.dout[d] * static_cast<acc_t>(value[d]);
      const acc_t ds = (acc_t(1) - g) * p * (dov - delta_a);
      n1 += ds * (acc_t(j) - center);
      n2 += ds * (acc_t(j) - center) * (acc_t(j) - center);
      const acc_t gamma = (acc_t(1) - g) * p + g * mixture_at(w, K, acc_t(j)) * beta_scale;
      w.first[j] = ds * a.scale;
      w.second[j] = g * (dov - beta_delta) * beta_scale;
      pairs.ds[row * a.key_len + j] = static_cast<scalar_t>(ds * a.scale);
      pairs.gamma[row * a.key_len + j] = static_cast<scalar_t>(gamma);
    }
    gpu::warp_sync();
    scalar_t* dq_row = gr.dq.row_of(bh, a.heads, i);
    for (int64_t d = lane; d < D; d += kWarp) {
      acc_t dq = 0;
      for (int64_t j = 0; j < n_keys; ++j) dq += w.first[j] * static_cast<acc_t>(keys[j * layout.key_stride + d]);
      dq_row[d] = static_cast<scalar_t>(dq);
    }
    // Component gradients from the three sums of gmm_math.h, each a lane reduction over the keys.
    for (int64_t k = 0; k < K; ++k) {
      acc_t m0 = 0, m1 = 0, m2 = 0;
      for (int64_t j = lane; j < n_keys; j += kWarp) {
        const acc_t dist = acc_t(j) - w.mu[k];
        const acc_t we = w.second[j] * exp_of(w.log_coeff[k] - dist * dist * w.inv_2var[k]);
        m0 += we;
        m1 += we * dist;
        m2 += we * dist * dist;
      }
      m0 = warp_sum(m0);
      m1 = warp_sum(m1);
      m2 = warp_sum(m2);
      if (lane == 0) {
        const int64_t at = row * K + k;
        const Component<acc_t> c = make_component<acc_t>(a.omega[at], a.mu[at], a.sigma[at], a.floor, a.normalization);
        const ComponentGrads<acc_t> cg = component_grads(c, m0, m1, m2);
        gr.domega.set(at, cg.omega);
        gr.dmu.set(at, cg.mu);
        gr.dsigma.set(at, cg.sigma);
      }
    }
    n1 = warp_sum(n1);
    n2 = warp_sum(n2);
    if (lane == 0) {
      gr.dgate.set(row, delta_b - delta_a);
      if (a.center.present()) {
        const LocalBiasRow<acc_t> lb = make_local_bias<acc_t>(center, a.width[row], a.floor);
        gr.dcenter.set(row, local_center_grad(lb, n1));
        gr.dwidth.set(row, local_width_grad(lb, n2));
      }
    }
    gpu::warp_sync();  // the next row overwrites the buffers
  }
}

}  // namespace mma_nmt::gmm::cuda
