"""Choice types that configs of several layers share (``config_io`` validates every ``Literal`` field)."""

from __future__ import annotations

from typing import Literal

# fused operators, or plain-PyTorch reference modules with the same parameters
Implementation = Literal["fused", "reference"]

# how the "general" Luong score h_t^T W_sc_i hs_s is computed (LuongMultiheadAttention): "projected_keys" projects the
# encoder states once per sentence into per-head keys (B, h, S, dh); "projected_query" (OpenNMT-py's form) projects the
# decoder state per head and scores it against the encoder states themselves. The same function and parameters.
LuongScoreForm = Literal["projected_keys", "projected_query"]

# train.compile and decode.compile: false (eager), true (torch.compile's default mode) or one of torch.compile's modes
# by name; "reduce-overhead" replays the compiled code as CUDA graphs on a GPU (docs/models_training.md)
CompileMode = Literal[False, True, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def compile_options(mode) -> dict | None:
    """The ``torch.compile`` keyword arguments of a :data:`CompileMode`: None for false (eager), ``{}`` for true (1
    and 0 pass the choices as true and false), ``{"mode": mode}`` for a mode by name."""
    if isinstance(mode, str):
        return {"mode": mode}
    return {} if mode else None
