"""Mixed multi-head self-attention (SPEC section 1): each head has its own hard mask kind (global, local, forward,
backward, causal). With spec ``"G"`` it is ordinary multi-head attention, so the same module also serves as standard
encoder self-attention, causal decoder self-attention (``"C"``) and cross-attention (``"G"`` with separate keys).

It is also a drop-in for ``nn.MultiheadAttention`` (docs/interop.md): constructed with that module's arguments (plus
``head_spec`` and ``window``), or copied from one with :meth:`MixedMultiheadAttention.from_torch`, it takes torch's
``forward`` arguments with torch's meanings (:mod:`mma_nmt.modules.torch_masks`) inside ``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer`` and ``nn.Transformer``."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn

from mma_nmt.config_io import check_choices
from mma_nmt.config_types import Implementation
from mma_nmt.modules.heads import init_attention_projections, joint_projection, merge_heads, split_heads
from mma_nmt.modules.torch_masks import TorchMasks, causal_bias, causal_head_kinds, resolve_torch_masks
from mma_nmt.ops.argument_defaults import draw_dropout_seed
from mma_nmt.ops.fused_attention import fused_attention
from mma_nmt.ops.head_spec import format_head_spec, parse_head_spec
from mma_nmt.ops.padding import resolve_key_lengths
from mma_nmt.reference.attention import attention_reference


@dataclass
class MixedAttentionConfig:
    embed_dim: int
    num_heads: int
    head_spec: str = "GLFB"  # letters per head, stretched to num_heads the paper's way ("GLFB" -> "GGLLFFBB")
    window: int = 1  # local heads see |i - j| <= window; the paper's best is 1
    dropout: float = 0.0  # attention-weight dropout
    bias: bool = True
    implementation: Implementation = "fused"  # or "reference": the plain-PyTorch formula, same parameters
    batch_first: bool = True  # inputs (batch, len, embed_dim); False: (len, batch, embed_dim), nn.MultiheadAttention's
    kdim: int | None = None  # width of the keys given to forward; None: embed_dim
    vdim: int | None = None  # width of the values given to forward; None: embed_dim

    def __post_init__(self):
        check_choices("", self)


# nn.MultiheadAttention's constructor arguments that have no meaning here, and why.
_REFUSED = {
    "add_bias_kv": "the learned extra key and value have no sentence position, so local, forward and backward heads "
                   "could not tell whether they see them",
    "add_zero_attn": "the extra zero key has no sentence position, so local, forward and backward heads could not tell "
                     "whether they see it",
}


class MixedMultiheadAttention(nn.Module):
    """Multi-head attention with a per-head mask kind, and a drop-in for ``nn.MultiheadAttention``.

    Two ways to build it:

    - ``MixedMultiheadAttention(MixedAttentionConfig(...))`` (mma_nmt's models): batch first by default, and
      ``forward`` returns per-head weights (B, H, T, S) only when ``need_weights=True``;
    - ``MixedMultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True, kdim=None, vdim=None, batch_first=False,
      device=None, dtype=None, *, head_spec="GLFB", window=1, implementation="fused")``, ``nn.MultiheadAttention``'s
      arguments, or :meth:`from_torch`: torch's defaults too, so ``forward`` returns head-averaged weights (B, T, S)
      unless ``need_weights=False`` or ``average_attn_weights=False``. ``add_bias_kv`` and ``add_zero_attn`` are
      refused (their extra key has no position for local, forward and backward heads).

    ``forward(query, key=query, value=key, key_padding_mask=None, need_weights=None, attn_mask=None,
    average_attn_weights=None, is_causal=False, *, key_lengths=None, query_offset=0)`` takes (B, T, E) inputs when
    ``batch_first``, else (T, B, E), or unbatched (T, E); returns ``(output shaped as query, weights or None)``. The
    masks have torch's meanings (:mod:`mma_nmt.modules.torch_masks`): what the fused operator takes (right padding as a
    boolean ``key_padding_mask`` or ``key_lengths`` (B,); a causal ``attn_mask`` on global heads, which then become
    causal) runs on it; any other mask runs on the plain-PyTorch formula, with the same parameters. Differences from
    torch: a query that sees no key gets zero output and weights (torch: NaN); the weights returned are those before
    dropout. A call whose ``key`` and ``value`` are left out or are ``query`` itself (with no ``query_offset``) is
    self-attention: on CUDA's FlashAttention path its query rows at padding positions may come out 0
    (``fused_attention``'s ``self_attention``); a call with other key tensors gets every query row computed.
    """

    # No packed (3E, E) input projection: torch's fused fast paths (TransformerEncoderLayer in eval mode), which read
    # these, see None and call forward instead. Nor torch's extra bias key or zero key.
    in_proj_weight = None
    in_proj_bias = None
    bias_k = None
    bias_v = None
    add_zero_attn = False

    def __init__(self, embed_dim: int | MixedAttentionConfig, num_heads: int | None = None, dropout: float = 0.0,
                 bias: bool = True, add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool | None = None, device=None, dtype=None, *,
                 head_spec: str = "GLFB", window: int = 1, implementation: Implementation = "fused"):
        super().__init__()
        torch_arguments = dict(num_heads=num_heads, dropout=dropout, bias=bias, add_bias_kv=add_bias_kv,
                               add_zero_attn=add_zero_attn, kdim=kdim, vdim=vdim, batch_first=batch_first,
                               head_spec=head_spec, window=window, implementation=implementation)
        self.torch_defaults = not isinstance(embed_dim, MixedAttentionConfig)
        config = _config_from_arguments(embed_dim, **torch_arguments)
        if config.embed_dim % config.num_heads != 0:
            raise ValueError(f"embed_dim={config.embed_dim} must be divisible by num_heads={config.num_heads}")
        if config.window < 0:
            raise ValueError(f"window must be >= 0, got {config.window}")
        if not 0.0 <= config.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {config.dropout}")
        self.config = config
        self.head_dim = config.embed_dim // config.num_heads
        self.head_kinds = parse_head_spec(config.head_spec, config.num_heads)
        e, factory = config.embed_dim, dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(e, e, bias=config.bias, **factory)
        self.k_proj = nn.Linear(config.kdim or e, e, bias=config.bias, **factory)
        self.v_proj = nn.Linear(config.vdim or e, e, bias=config.bias, **factory)
        self.out_proj = nn.Linear(e, e, bias=config.bias, **factory)
        self.reset_parameters()

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, *, head_spec: str = "G", window: int = 1,
                   implementation: Implementation = "fused") -> MixedMultiheadAttention:
        """A copy of ``mha`` (its weights, dropout, bias, kdim/vdim, batch_first, device, dtype and training mode)
        with head kinds ``head_spec``; with the default ``"G"`` it computes what ``mha`` computes. ``in_proj_weight``
        (3E, E) is split into ``q_proj``, ``k_proj``, ``v_proj`` (or ``q/k/v_proj_weight`` are copied when kdim or
        vdim differ from embed_dim)."""
        for name, used in (("add_bias_kv", mha.bias_k is not None), ("add_zero_attn", mha.add_zero_attn)):
            if used:
                raise ValueError(f"MixedMultiheadAttention.from_torch: the module was built with {name}=True, which "
                                 f"MixedMultiheadAttention does not support: {_REFUSED[name]}")
        weight = mha.out_proj.weight
        module = cls(mha.embed_dim, mha.num_heads, dropout=mha.dropout, bias=mha.in_proj_bias is not None,
                     kdim=mha.kdim, vdim=mha.vdim, batch_first=mha.batch_first, device=weight.device,
                     dtype=weight.dtype, head_spec=head_spec, window=window, implementation=implementation)
        if mha._qkv_same_embed_dim:
            weights = mha.in_proj_weight.chunk(3)  # (3E, E) -> 3 x (E, E)
        else:
            weights = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
        biases = (None,) * 3 if mha.in_proj_bias is None else mha.in_proj_bias.chunk(3)  # (3E,) -> 3 x (E,)
        with torch.no_grad():
            for proj, w, b in zip((module.q_proj, module.k_proj, module.v_proj, module.out_proj),
                                  (*weights, mha.out_proj.weight), (*biases, mha.out_proj.bias)):
                proj.weight.copy_(w)
                if b is not None:
                    proj.bias.copy_(b)
        return module.train(mha.training)

    def reset_parameters(self) -> None:
        init_attention_projections((self.q_proj, self.k_proj, self.v_proj), self.out_proj)

    # nn.MultiheadAttention's attributes, read by nn.TransformerEncoderLayer, nn.TransformerEncoder and others.
    @property
    def embed_dim(self) -> int:
        return self.config.embed_dim

    @property
    def num_heads(self) -> int:
        return self.config.num_heads

    @property
    def dropout(self) -> float:
        return self.config.dropout

    @property
    def batch_first(self) -> bool:
        return self.config.batch_first

    @property
    def kdim(self) -> int:
        return self.config.kdim or self.config.embed_dim

    @property
    def vdim(self) -> int:
        return self.config.vdim or self.config.embed_dim

    @property
    def _qkv_same_embed_dim(self) -> bool:
        return self.kdim == self.embed_dim and self.vdim == self.embed_dim

    def extra_repr(self) -> str:
        c = self.config
        return (f"embed_dim={c.embed_dim}, heads={format_head_spec(self.head_kinds)}, window={c.window}, "
                f"dropout={c.dropout}, implementation={c.implementation}, batch_first={c.batch_first}")

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.config.num_heads)  # (B, L, E) -> (B, H, L, D)

    def project_self(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention's queries, keys and values, (B, L, E) -> 3 x (B, H, L, D), from one GEMM."""
        q, k, v = joint_projection(x, (self.q_proj, self.k_proj, self.v_proj))  # 3 x (B, L, E)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention's keys and values of the same memory, (B, S, E) -> 2 x (B, H, S, D), from one GEMM."""
        k, v = joint_projection(memory, (self.k_proj, self.v_proj))  # 2 x (B, S, E)
        return self.split_heads(k), self.split_heads(v)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool | None = None,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool | None = None,
        is_causal: bool = False,
        *,
        key_lengths: torch.Tensor | None = None,
        query_offset: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        op = type(self).__name__
        if query.is_nested:
            return self._forward_nested(query, key, value, need_weights=need_weights, attn_mask=attn_mask,
                                        key_padding_mask=key_padding_mask, key_lengths=key_lengths)
        need_weights = self.torch_defaults if need_weights is None else need_weights
        average = self.torch_defaults if average_attn_weights is None else average_attn_weights
        unbatched = query.dim() == 2
        self_attention = (key is None or key is query) and (value is None or value is query)
        key = query if key is None else key
        value = key if value is None else value
        query = self._batch_first(query, "query", self.embed_dim, unbatched)  # (B, T, E)
        if self_attention:
            q, k, v = self.project_self(query)  # (B, H, T, D) each
        else:
            q = self.split_heads(self.q_proj(query))  # (B, H, T, D)
            k = self.split_heads(self.k_proj(self._batch_first(key, "key", self.kdim, unbatched)))  # (B, H, S, D)
            v = self.split_heads(self.v_proj(self._batch_first(value, "value", self.vdim, unbatched)))  # (B, H, S, D)
        if unbatched and key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)  # (S,) -> (1, S)
        batch, heads, query_len, _ = q.shape
        masks = resolve_torch_masks(op, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal,
                                    batch=batch, heads=heads, query_len=query_len, key_len=k.shape[2],
                                    query_offset=query_offset, dtype=q.dtype)
        if key_lengths is not None and key_padding_mask is not None:
            raise ValueError(f"{op}: give key padding either as key_lengths or as key_padding_mask, not both")
        lengths = resolve_key_lengths(key_lengths if key_padding_mask is None else masks.key_lengths, None,
                                      query.device, keys=(batch, k.shape[2]), op=op)
        head_kinds, logit_bias = self._kinds_and_bias(masks, query_len, k.shape[2], q.dtype, q.device)
        out, weights = self.attend(q, k, v, lengths, need_weights=need_weights, query_offset=query_offset,
                                   head_kinds=head_kinds, logit_bias=logit_bias,
                                   self_attention=self_attention and query_offset == 0)
        out = self.out_proj(merge_heads(out))  # (B, H, T, D) -> (B, T, E)
        if weights is not None and average:
            weights = weights.mean(dim=1)  # (B, H, T, S) -> (B, T, S)
        if unbatched:
            return out.squeeze(0), (None if weights is None else weights.squeeze(0))
        return (out if self.batch_first else out.transpose(0, 1)), weights

    def _forward_nested(self, x: torch.Tensor, key, value, **arguments) -> tuple[torch.Tensor, None]:
        """Self-attention on a NestedTensor of (L_b, E) sentences, which ``nn.TransformerEncoder`` passes its layers in
        its inference fast path (eval mode, no gradients, a ``src_key_padding_mask``, batch first) when it was built
        around ``nn.MultiheadAttention``: padded, attended with the lengths as key padding, and nested again."""
        op = type(self).__name__
        extra = [name for name, value in arguments.items() if value not in (None, False)]
        if (key is not None and key is not x) or (value is not None and value is not x) or extra:
            raise ValueError(f"{op}: a NestedTensor query is taken only for self-attention without masks or weights "
                             f"(nn.TransformerEncoder's fast path); got {', '.join(extra) or 'other keys or values'}")
        sentences = x.unbind()  # B x (L_b, E)
        lengths = torch.tensor([len(s) for s in sentences], device=x.device)  # (B,)
        padded = x.to_padded_tensor(0.0)  # (B, L, E)
        if not self.batch_first:
            padded = padded.transpose(0, 1)  # (L, B, E), as forward reads it
        out, _ = self.forward(padded, key_lengths=lengths, need_weights=False)
        out = out if self.batch_first else out.transpose(0, 1)  # (B, L, E)
        return torch.nested.as_nested_tensor([out[b, :n] for b, n in enumerate(lengths.tolist())]), None

    def _batch_first(self, x: torch.Tensor, name: str, width: int, unbatched: bool) -> torch.Tensor:
        """``x`` as (B, L, width): unbatched (L, width) gets a batch of one, sequence-first (L, B, width) is
        transposed (a view)."""
        layout = "(batch, len" if self.batch_first else "(len, batch"
        if x.dim() != (2 if unbatched else 3) or x.shape[-1] != width:
            raise ValueError(f"{name} must have shape {layout}, embed_dim={width}) or, unbatched, (len, {width}), "
                             f"got {tuple(x.shape)}")
        if unbatched:
            return x.unsqueeze(0)  # (L, E) -> (1, L, E)
        return x if self.batch_first else x.transpose(0, 1)  # (L, B, E) -> (B, L, E)

    def _kinds_and_bias(self, masks: TorchMasks, query_len: int, key_len: int, dtype, device):
        """The head kinds and the logit bias (None: the fused operator can run) that give ``masks``' meaning."""
        if not masks.causal:
            return self.head_kinds, masks.logit_bias
        kinds = causal_head_kinds(self.head_kinds)
        if kinds is not None:
            return kinds, masks.logit_bias
        bias = causal_bias(query_len, key_len, dtype=dtype, device=device)  # (T, S): local or forward heads
        return self.head_kinds, (bias if masks.logit_bias is None else masks.logit_bias + bias)

    def attend(self, q, k, v, key_lengths, *, need_weights: bool, query_offset: int, head_kinds=None,
               logit_bias: torch.Tensor | None = None, self_attention: bool = False):
        """Per-head attention on already projected (B, H, L, D) tensors; returns (out, weights or None). ``head_kinds``
        replaces the module's own; a ``logit_bias`` (broadcastable to (B, H, T, S), -inf = hidden) is added to the
        logits by the plain-PyTorch formula, whichever the implementation (the fused operator takes no bias).
        ``self_attention``: the queries are the keys' own positions, so the fused operator may return 0 at padding
        query rows (``fused_attention``)."""
        c = self.config
        head_kinds = self.head_kinds if head_kinds is None else head_kinds
        dropout = c.dropout if self.training else 0.0
        if c.implementation == "reference" or logit_bias is not None:
            seed = draw_dropout_seed(dropout)
            out, probs = attention_reference(q, k, v, head_kinds=head_kinds, key_lengths=key_lengths,
                                             window=c.window, query_offset=query_offset, dropout_p=dropout, seed=seed,
                                             logit_bias=logit_bias)
            return out, (probs if need_weights else None)
        result = fused_attention(q, k, v, head_kinds=head_kinds, key_lengths=key_lengths, window=c.window,
                                 query_offset=query_offset, dropout_p=dropout, return_probs=need_weights,
                                 self_attention=self_attention)
        return result.out, result.probs


def _config_from_arguments(embed_dim: int | MixedAttentionConfig, **arguments) -> MixedAttentionConfig:
    """The config given, or the one that ``nn.MultiheadAttention``'s ``arguments`` (plus head_spec, window,
    implementation) describe; refuses a mix of both and the arguments that have no meaning here."""
    if isinstance(embed_dim, MixedAttentionConfig):
        defaults = {name: p.default for name, p in inspect.signature(MixedMultiheadAttention).parameters.items()}
        mixed = [f"{name}={value!r}" for name, value in arguments.items() if value != defaults[name]]
        if mixed:
            raise TypeError(f"MixedMultiheadAttention: give either a MixedAttentionConfig or nn.MultiheadAttention's "
                            f"arguments, not both (got a config and {', '.join(mixed)})")
        return embed_dim
    for name, why in _REFUSED.items():
        if arguments.pop(name):
            raise ValueError(f"MixedMultiheadAttention: {name}=True is not supported: {why}; leave it False")
    if arguments["num_heads"] is None:
        raise TypeError("MixedMultiheadAttention: num_heads is required with embed_dim (or give a "
                        "MixedAttentionConfig)")
    batch_first = arguments.pop("batch_first")
    return MixedAttentionConfig(embed_dim, batch_first=bool(batch_first), **arguments)
