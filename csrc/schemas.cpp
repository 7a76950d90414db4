// Every operator schema of the mma_nmt library, in one place. Backends register kernels with TORCH_LIBRARY_IMPL in
// their own files; Python adds the fake (meta) kernels and autograd (mma_nmt/ops/).
#include <torch/library.h>

TORCH_LIBRARY(mma_nmt, m) {
  // Fused scaled-dot-product attention with a per-head mask kind (see csrc/attention/head_mask.h) and key padding given
  // as lengths. Returns (out (B,H,T,Dv), lse (B,H,T), probs (B,H,T,S) if return_probs else (0,)). self_attention: the
  // caller says the queries are the keys' own positions (T = S, query_offset 0), so query rows past a sentence's
  // length are padding, which a path may return as 0 with no gradient (SPEC, shared rules; attention/flash_plan.h).
  m.def(
      "attention(Tensor q, Tensor k, Tensor v, Tensor? key_lengths, int[] head_kinds, int window, float scale, "
      "int query_offset=0, float dropout_p=0.0, SymInt seed=0, bool return_probs=False, bool self_attention=False) "
      "-> (Tensor, Tensor, Tensor)");
  m.def(
      "attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? key_lengths, "
      "int[] head_kinds, int window, float scale, int query_offset, float dropout_p, SymInt seed, "
      "bool self_attention=False) -> (Tensor, Tensor, Tensor)");

  // Gaussian-mixture concentrated cross-attention (SPEC section 5, csrc/gmm/): per query, out = (1 - gate) * (alpha v)
  // + gate * (beta v) with alpha the dot-product softmax (plus the localness-Gaussian logit bias when local_center and
  // local_width are given) and beta the K-component mixture of (omega, mu, sigma), all (B,H,T,K). normalization: 0
  // approximate, 1 strict, 2 unnormalised (gmm_math.h). Returns (out (B,H,T,Dv), lse (B,H,T), log_mass (B,H,T) = log of
  // the unnormalised mixture's sum over the sentence, alpha_context (B,H,T,Dv) = alpha v, beta_context (B,H,T,Dv) =
  // beta v, alpha (B,H,T,S) and beta (B,H,T,S) if return_weights else (0,)).
  m.def(
      "gmm_attention(Tensor q, Tensor k, Tensor v, Tensor? key_lengths, Tensor omega, Tensor mu, Tensor sigma, "
      "Tensor gate, Tensor? local_center, Tensor? local_width, float scale, int normalization, float sigma_floor, "
      "bool return_weights=False) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // Gradients for (q, k, v, omega, mu, sigma, gate, local_center, local_width); the last two are (0,) without the bias.
  m.def(
      "gmm_attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor? key_lengths, Tensor omega, "
      "Tensor mu, Tensor sigma, Tensor gate, Tensor? local_center, Tensor? local_width, Tensor lse, Tensor log_mass, "
      "Tensor alpha_context, Tensor beta_context, float scale, int normalization, float sigma_floor) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

// ---- Multi-hop attention (SPEC section 4), csrc/multihop/ ----------------------------------------------------------
TORCH_LIBRARY_FRAGMENT(mma_nmt, m) {
  // Second hop of multi-hop attention at every (sentence b, position t) over the H heads:
  // e_h = v_b . tanh(query_proj_h + head_proj_h), gate = softmax over heads of e, out_h = gate_h * value_proj_h.
  // query_proj = W_b q_h and head_proj = U_b_h a_h are (B, H, T, Db), value_proj = U_c_h a_h is (B, H, T, Dc) (the
  // layout of the first hop's output), v_b is (Db,). Returns (out (B, H, T, Dc), gate (B, H, T)).
  m.def("multihop_gate(Tensor query_proj, Tensor head_proj, Tensor value_proj, Tensor v_b) -> (Tensor, Tensor)");
  // Returns (grad_pre (B, H, T, Db): the gradient of both query_proj and head_proj, grad_value_proj, grad_v_b).
  m.def(
      "multihop_gate_backward(Tensor grad_out, Tensor? grad_gate, Tensor query_proj, Tensor head_proj, "
      "Tensor value_proj, Tensor v_b, Tensor gate) -> (Tensor, Tensor, Tensor)");
  // The whole second hop with its projections, from q (B, H, T, D) (each head's query slice) and a (B, H, T, D) (the
  // first hop's output): e_h = v_b . tanh(W_b q_h + U_b_h a_h), gate = softmax over heads of e,
  // out_h = gate_h * U_c_h a_h, or gate_h * a_h without u_c. w_b (Db, D), u_b (H, Db, D), u_c (H, Dc, D), v_b (Db,).
  // Returns (out (B, H, T, Dc), gate (B, H, T), hidden (B, H, T, Db) = tanh(W_b q_h + U_b_h a_h), kept for backward).
  m.def(
      "multihop_second_hop(Tensor q, Tensor a, Tensor w_b, Tensor u_b, Tensor? u_c, Tensor v_b) "
      "-> (Tensor, Tensor, Tensor)");
  // Returns (grad_q, grad_a, grad_w_b, grad_u_b, grad_u_c (empty without u_c), grad_v_b).
  m.def(
      "multihop_second_hop_backward(Tensor grad_out, Tensor? grad_gate, Tensor q, Tensor a, Tensor w_b, Tensor u_b, "
      "Tensor? u_c, Tensor v_b, Tensor gate, Tensor hidden) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

// ---- Multi-head Luong attention (SPEC section 2), csrc/luong/ ------------------------------------------------------
TORCH_LIBRARY_FRAGMENT(mma_nmt, m) {
  // Attention of q (B, H, T, D) over per-head keys k (B, H, S, D) and one value set v (B, S, Dv) shared by every head,
  // with key padding as lengths. Returns (out (B, H, T, Dv), lse (B, H, T), probs (B, H, T, S) if return_probs
  // else (0,)).
  m.def(
      "shared_value_attention(Tensor q, Tensor k, Tensor v, Tensor? key_lengths, float scale, "
      "bool return_probs=False) -> (Tensor, Tensor, Tensor)");
  m.def(
      "shared_value_attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "Tensor? key_lengths, float scale) -> (Tensor, Tensor, Tensor)");
}

// ---- Multi-layer multi-head attention (SPEC section 3), csrc/multilayer/ -------------------------------------------
TORCH_LIBRARY_FRAGMENT(mma_nmt, m) {
  // Decoder attention over the top n encoder layers, read from the per-layer projections in place (no arrangement):
  // q[i] (B, T, E), k[i] (B, S, E) for the n layers, v[j] (B, S, Ev) for n value sets or 1 (values summed over layers,
  // joint weights only); E and Ev split into num_heads heads. Joint weights (layer_specific false): one softmax over
  // sum_i q_i k_i^T * scale per head; layer-specific: one per layer and head. Returns (out (B, T, sets*Ev): the
  // concatenated contexts [c_1 .. c_sets], lse (B, heads', T), probs (B, heads', T, S) if return_probs else (0,)) with
  // heads' = num_heads (joint) or n*num_heads (layer i's head h at i*num_heads + h). See multilayer_params.h.
  // The backward takes the forward's probs when it has them (CPU: the weights are then not recomputed from q and k).
  m.def(
      "multilayer_attention(Tensor[] q, Tensor[] k, Tensor[] v, Tensor? key_lengths, int num_heads, float scale, "
      "bool layer_specific, bool return_probs=False) -> (Tensor, Tensor, Tensor)");
  m.def(
      "multilayer_attention_backward(Tensor grad_out, Tensor[] q, Tensor[] k, Tensor[] v, Tensor out, Tensor lse, "
      "Tensor? probs, Tensor? key_lengths, int num_heads, float scale, bool layer_specific) "
      "-> (Tensor[], Tensor[], Tensor[])");
}
