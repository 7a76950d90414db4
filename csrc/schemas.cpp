// Every operator schema of the mma_nmt library, in one place. Backends register kernels with TORCH_LIBRARY_IMPL in
// their own files; Python adds the fake (meta) kernels and autograd (mma_nmt/ops/).
#include <torch/library.h>

TORCH_LIBRARY(mma_nmt, m) {
  // Fused scaled-dot-product attention with a per-head mask kind (see csrc/attention/head_mask.h) and key padding given
  // as lengths. Returns (out (B,H,T,Dv), lse (B,H,T), probs (B,H,T,S) if return_probs else (0,)).
  m.def(
      "attention(Tensor q, Tensor k, Tensor v, Tensor? key_lengths, int[] head_kinds, int window, float scale, "
      "int query_offset=0, float dropout_p=0.0, int seed=0, bool return_probs=False) -> (Tensor, Tensor, Tensor)");
  m.def(
      "attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? key_lengths, "
      "int[] head_kinds, int window, float scale, int query_offset, float dropout_p, int seed) "
      "-> (Tensor, Tensor, Tensor)");
}
