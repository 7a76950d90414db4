"""Attention maps of translated sentences as PNG files, drawn with :mod:`mma_nmt.analysis.attention_maps`."""

from __future__ import annotations

from pathlib import Path

import torch

from mma_nmt.analysis._figures import save_figure
from mma_nmt.analysis.attention_maps import plot_sentence_attention, sentence_attention
from mma_nmt.ops.head_spec import format_head_spec


@torch.no_grad()
def write_attention_maps(model, src_ids: torch.Tensor, hyp_ids: list[int], *, src_tokenizer, tgt_tokenizer,
                         out_dir: str | Path, name: str) -> list[Path]:
    """Teacher-forces ``hyp_ids`` on ``src_ids`` (1-d, no specials) and writes ``<name>_cross.png`` (every decoder
    layer and head) and, for a Transformer, ``<name>_encoder_self.png`` (every encoder layer and head, titled with
    its head kind)."""
    device = next(model.parameters()).device
    src = src_ids.view(1, -1).to(device)
    prev = torch.tensor([[tgt_tokenizer.bos_id] + list(hyp_ids)], device=device)
    encoder_out = model.encode(src, torch.tensor([src.shape[1]], device=device), need_weights=True)
    _, cross = model.decode(prev, encoder_out, need_weights=True)
    weights = {"cross": cross}
    layers = sorted((k for k in encoder_out.extra if k.startswith("self_attn.")), key=lambda k: int(k[10:]))
    if layers:
        weights["encoder_self"] = [encoder_out.extra[k] for k in layers]
    last_layer = model.encoder_layers[-1] if hasattr(model, "encoder_layers") else None
    kinds = getattr(getattr(last_layer, "self_attn", None), "head_kinds", None)
    maps = sentence_attention(weights, 0, source_tokens=[src_tokenizer.id_to_piece(i) for i in src_ids.tolist()],
                              target_tokens=[tgt_tokenizer.id_to_piece(i) for i in hyp_ids] + ["</s>"],
                              encoder_head_kinds=format_head_spec(kinds) if kinds else None)
    return [save_figure(figure, Path(out_dir) / f"{name}_{block}.png")
            for block, figure in plot_sentence_attention(maps).items()]
