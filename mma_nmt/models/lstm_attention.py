"""The LSTM decoder's multi-head Luong attention (SPEC section 2): :class:`~mma_nmt.modules.LuongMultiheadAttention`
built from an :class:`LSTMConfig`, for both implementations (``"reference"``: plain PyTorch, ``"fused"``: the
``shared_value_attention`` operator).

Until issue 23 the LSTM had its own plain-PyTorch module, whose parameters were ``score.weight`` (h*dh, dh),
``w_softmax`` (h, 2dh, d_sm/h) and ``w_feed`` (h, 2dh, d_fd/h) (*the earlier layout*; checkpoints of both
implementations were written in it). The module's own layout is ``w_sc`` (h, dh, dh), ``w_context`` and ``w_state``
(h, d_sm/h + d_fd/h, dh). New checkpoints use the module's layout; this file keeps the earlier one readable:

- :func:`luong_reference_to_module` / :func:`luong_module_to_reference`: the pure rearrangement between the layouts;
- :func:`load_reference_layout`: the load-state-dict pre-hook that converts a checkpoint in the earlier layout;
- :func:`init_reference_layout`: the earlier module's initial draws, in its layout and order, so that a seed gives the
  same LSTM as before (with and without ``LSTMConfig.param_init``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mma_nmt.models.config import LSTMConfig
from mma_nmt.modules import LuongAttentionConfig, LuongMultiheadAttention

REFERENCE_NAMES = ("score.weight", "w_softmax", "w_feed")  # the earlier layout, in parameter order
MODULE_NAMES = ("w_sc", "w_context", "w_state")


def build_luong_attention(config: LSTMConfig) -> LuongMultiheadAttention:
    """The attention of ``config``, initialised as the earlier module was (:func:`init_reference_layout`)."""
    if config.attention != "luong":
        raise ValueError(f"unknown LSTM attention {config.attention!r}; known: ['luong']")
    attention_config = LuongAttentionConfig(hidden_dim=config.hidden_size, num_heads=config.heads,
                                            softmax_dim=config.softmax_dim, feed_dim=config.feed_dim,
                                            implementation=config.implementation, score_form=config.score_form)
    with torch.device("meta"):  # the module's own initialisation draws no random numbers here
        attention = LuongMultiheadAttention(attention_config)
    attention.to_empty(device=torch.get_default_device())
    init_reference_layout(attention)
    return attention


@torch.no_grad()
def init_reference_layout(attention: LuongMultiheadAttention, *, bound: float | None = None) -> None:
    """Draws the weights of ``attention`` as the earlier module did, in its layout and order, and stores them in the
    module's layout. Without ``bound`` (its constructor): ``score`` (h*dh, dh) as ``nn.Linear`` (U(+-1/sqrt(dh))),
    then ``w_softmax`` (h, 2dh, d_sm/h) and ``w_feed`` (h, 2dh, d_fd/h) from U(+-1/sqrt(2dh)). With ``bound``
    (``LSTMConfig.param_init``, a uniform draw of every parameter in ``parameters()`` order): ``w_softmax``, ``w_feed``,
    then ``score`` (a submodule's parameters come after the module's own), all from U(+-bound)."""
    c = attention.config
    heads, dh = c.num_heads, c.hidden_dim
    like = dict(dtype=attention.w_sc.dtype, device=attention.w_sc.device)
    score = torch.empty(heads * dh, dh, **like)
    w_softmax = torch.empty(heads, 2 * dh, c.softmax_dim // heads, **like)
    w_feed = torch.empty(heads, 2 * dh, c.feed_dim // heads, **like)
    if bound is None:
        nn.init.kaiming_uniform_(score, a=math.sqrt(5))  # nn.Linear's default
        for weight in (w_softmax, w_feed):
            weight.uniform_(-1.0 / math.sqrt(2 * dh), 1.0 / math.sqrt(2 * dh))
    else:
        for weight in (w_softmax, w_feed, score):
            weight.uniform_(-bound, bound)
    converted = luong_reference_to_module(score, w_softmax, w_feed, heads=heads)
    for name, value in zip(MODULE_NAMES, converted):
        getattr(attention, name).copy_(value)


def load_reference_layout(attention: LuongMultiheadAttention, state_dict: dict, prefix: str, *args) -> None:
    """Load-state-dict pre-hook of the attention: entries ``prefix + REFERENCE_NAMES`` (a checkpoint in the earlier
    layout) are replaced, in place, by ``prefix + MODULE_NAMES``. A state dict in the module's layout is left alone."""
    names = [prefix + name for name in REFERENCE_NAMES]
    if all(name in state_dict for name in names):
        converted = luong_reference_to_module(*(state_dict.pop(name) for name in names),
                                              heads=attention.config.num_heads)
        state_dict.update(zip((prefix + name for name in MODULE_NAMES), converted))


def holds_reference_layout(state_dict: dict) -> bool:
    """Whether a model state dict holds an LSTM attention in the earlier layout (a checkpoint written before the LSTM
    used :class:`LuongMultiheadAttention`). Its weights load (:func:`load_reference_layout`), but optimizer moments
    saved beside them have the earlier shapes."""
    return any(key.endswith("." + REFERENCE_NAMES[1]) for key in state_dict)


def luong_reference_to_module(score: torch.Tensor, w_softmax: torch.Tensor, w_feed: torch.Tensor, heads: int
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Earlier layout (score (h*dh, dh), w_softmax (h, 2dh, sm/h), w_feed (h, 2dh, fd/h)) -> module layout
    (w_sc (h, dh, dh), w_context (h, sm/h + fd/h, dh), w_state (h, sm/h + fd/h, dh))."""
    dh = score.shape[1]
    w_sc = score.reshape(heads, dh, dh)
    joined = torch.cat([w_softmax, w_feed], dim=2).transpose(1, 2)  # (h, o, 2dh) acting on [c; h_t]
    return w_sc, joined[..., :dh].contiguous(), joined[..., dh:].contiguous()


def luong_module_to_reference(w_sc: torch.Tensor, w_context: torch.Tensor, w_state: torch.Tensor, softmax_dim: int
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`luong_reference_to_module`."""
    heads, dh, _ = w_sc.shape
    sm = softmax_dim // heads
    joined = torch.cat([w_context, w_state], dim=2).transpose(1, 2)  # (h, 2dh, o)
    return w_sc.reshape(heads * dh, dh), joined[..., :sm].contiguous(), joined[..., sm:].contiguous()
