"""Mixed multi-head encoder self-attention (SPEC section 1) in Hugging Face transformers models.

    import mma_nmt.hf
    mma_nmt.hf.register()
    model = MarianMTModel.from_pretrained(path, attn_implementation="mma_nmt")
    mma_nmt.hf.set_head_spec(model, "GLFB", window=1)

Needs the ``[hf]`` extra (``pip install -e ".[hf]"``); ``import mma_nmt`` itself never imports transformers. What
takes the head kinds and what falls back: :mod:`mma_nmt.hf.attention` and docs/huggingface.md.
"""

from __future__ import annotations

try:
    import transformers  # noqa: F401
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("mma_nmt.hf needs transformers: pip install -e '.[hf]' (or pip install transformers)") from error

from mma_nmt.hf.attention import mma_nmt_attention
from mma_nmt.hf.masks import register_mask_function
from mma_nmt.hf.spec import ATTENTION_NAME, CONFIG_KEY, HeadSpec, head_spec_of, restore_head_spec, set_head_spec

__all__ = ["ATTENTION_NAME", "CONFIG_KEY", "HeadSpec", "head_spec_of", "mma_nmt_attention", "register",
           "restore_head_spec", "set_head_spec"]


def register() -> None:
    """Registers the attention function ``"mma_nmt"`` with transformers' ``AttentionInterface``, and sdpa's mask
    function under the same name (without it, transformers 5 builds no mask for a custom attention function).
    Idempotent."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, mma_nmt_attention)
    register_mask_function(ATTENTION_NAME)
