"""Attention maps of translated sentences as PNG files, drawn with :mod:`mma_nmt.analysis.attention_maps` from a
force-decoded pass in record mode (:mod:`mma_nmt.evaluation.force_decode`)."""

from __future__ import annotations

from pathlib import Path

import torch

from mma_nmt.analysis._figures import save_figure
from mma_nmt.analysis.attention_maps import plot_sentence_attention
from mma_nmt.evaluation.force_decode import force_decode, pieces, sentence_maps


@torch.no_grad()
def write_attention_maps(model, src_ids: torch.Tensor, hyp_ids: list[int], *, src_tokenizer, tgt_tokenizer,
                         out_dir: str | Path, name: str) -> list[Path]:
    """Teacher-forces ``hyp_ids`` on ``src_ids`` (1-d, no specials) and writes ``<name>_<block>.png`` for every block
    the model has: ``encoder_self`` (every encoder layer and head, titled with its head kind), ``decoder_self`` and
    ``cross`` (every decoder layer and head). An empty source has no maps."""
    if len(src_ids) == 0:
        return []
    record = force_decode(model, [src_ids.cpu()], [torch.tensor(list(hyp_ids), dtype=torch.int64)],
                          bos_id=tgt_tokenizer.bos_id).sentence(0)
    maps = sentence_maps(record, source_tokens=pieces(src_tokenizer, src_ids),
                         target_tokens=pieces(tgt_tokenizer, hyp_ids) + ["</s>"])
    return [save_figure(figure, Path(out_dir) / f"{name}_{block}.png")
            for block, figure in plot_sentence_attention(maps).items()]
