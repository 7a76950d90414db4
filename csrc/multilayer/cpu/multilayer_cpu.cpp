// CPU implementation of mma_nmt::multilayer_attention and its backward: argument checks, output allocation, and the
// choice of the kernel build that matches the processor.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "attention/attention_outputs.h"
#include "common/cpu_isa.h"
#include "multilayer/cpu/kernel_api.h"

namespace mma_nmt::multilayer::cpu {
namespace {

std::vector<at::Tensor> contiguous(at::TensorList xs) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& x : xs) out.push_back(x.contiguous());
  return out;
}

// Gradients like `xs`: uninitialised when the kernel writes them whole, else zero.
std::vector<at::Tensor> gradients_like(at::TensorList xs, bool written) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& x : xs) {
    out.push_back(written ? at::empty_like(x, at::MemoryFormat::Contiguous)
                          : at::zeros_like(x, at::MemoryFormat::Contiguous));
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> multilayer_attention_cpu(
    at::TensorList q, at::TensorList k, at::TensorList v, const std::optional<at::Tensor>& key_lengths,
    int64_t num_heads, double scale, bool layer_specific, bool return_probs) {
  const char* op = "mma_nmt.multilayer_attention";
  const MultilayerParams p = check_multilayer_args(op, q, k, v, key_lengths, num_heads, scale, layer_specific);
  check_cpu_floating(op, q[0]);
  const at::TensorOptions options = q[0].options();
  at::Tensor out = at::empty({p.batch, p.query_len, p.output_sets() * p.value_embed_dim()}, options);
  at::Tensor lse = at::empty({p.batch, p.fused_heads(), p.query_len},
                             options.dtype(stats_dtype(q[0].scalar_type())));
  at::Tensor probs = return_probs ? at::zeros({p.batch, p.fused_heads(), p.query_len, p.key_len}, options)
                                  : at::empty({0}, options);
  if (lse.numel() == 0) return {out, lse, probs};  // no query row
  MultilayerForward t{contiguous(q), contiguous(k), contiguous(v),
                      contiguous_or_undefined(key_lengths),
                      out, lse, return_probs ? probs : at::Tensor()};
  MMA_NMT_CPU_DISPATCH(multilayer_forward, p, t);
  return {out, lse, probs};
}

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>> multilayer_attention_backward_cpu(
    const at::Tensor& grad_out, at::TensorList q, at::TensorList k, at::TensorList v, const at::Tensor& out,
    const at::Tensor& lse, const std::optional<at::Tensor>& probs, const std::optional<at::Tensor>& key_lengths,
    int64_t num_heads, double scale, bool layer_specific) {
  const char* op = "mma_nmt.multilayer_attention_backward";
  const MultilayerParams p = check_multilayer_args(op, q, k, v, key_lengths, num_heads, scale, layer_specific);
  check_cpu_floating(op, q[0]);
  check_multilayer_backward_extras(op, p, q[0], grad_out, out, lse, probs);
  // Without a query row or a key every gradient is zero; otherwise the kernel writes every element.
  const bool has_work = lse.numel() > 0 && p.key_len > 0;
  MultilayerBackward t{contiguous(q), contiguous(k), contiguous(v),
                       contiguous_or_undefined(key_lengths),
                       grad_out.contiguous(), out.contiguous(), lse.contiguous(),
                       contiguous_or_undefined(probs),
                       gradients_like(q, has_work), gradients_like(k, has_work), gradients_like(v, has_work)};
  if (has_work) {
    MMA_NMT_CPU_DISPATCH(multilayer_backward, p, t);
  }
  return {t.grad_q, t.grad_k, t.grad_v};
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CPU, m) {
  m.impl("multilayer_attention", &multilayer_attention_cpu);
  m.impl("multilayer_attention_backward", &multilayer_attention_backward_cpu);
}

}  // namespace mma_nmt::multilayer::cpu
