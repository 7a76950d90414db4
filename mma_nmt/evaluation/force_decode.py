"""Teacher-forced ("force-decoded") passes that hand out a model's attention for the analyses of
:mod:`mma_nmt.analysis`: the reference translation is fed to the decoder and every attention module is recorded
(:func:`mma_nmt.models.recording.record_attention`)."""

from __future__ import annotations

from typing import Iterator, Sequence

import torch
from torch import nn

from mma_nmt.analysis.attention_maps import SentenceAttention
from mma_nmt.data.batch import pad_sequences
from mma_nmt.data.tokenizer import BOS_ID, PAD_ID
from mma_nmt.models.recording import AttentionRecord, SentenceRecord, collect_attention, record_attention


@torch.no_grad()
def force_decode(model: nn.Module, sources: Sequence[torch.Tensor], targets: Sequence[torch.Tensor], *,
                 bos_id: int = BOS_ID, pad_id: int = PAD_ID, reference: bool = True) -> AttentionRecord:
    """Attention of ``model`` (in eval mode for the call) on sentence pairs, teacher-forced.

    Args:
        sources: (S_i,) int64 source ids per sentence, without specials.
        targets: (T_i,) int64 target ids per sentence, without BOS/EOS; the decoder reads ``BOS + target`` (T_i + 1
            positions), so row ``t`` of the decoder's weights predicts target token ``t`` and the last row EOS.
        reference: compute with the reference formulas (default) or the modules' own implementation.
    """
    if len(sources) != len(targets) or not sources:
        raise ValueError(f"need one target per source and at least one pair, got {len(sources)} sources and "
                         f"{len(targets)} targets")
    empty = [i for i, s in enumerate(sources) if len(s) == 0]
    if empty:
        raise ValueError(f"sources {empty[:5]} have no tokens; attention over an empty source is undefined")
    src, src_lengths = pad_sequences(sources, pad_id=pad_id)  # (B, S)
    prev, tgt_lengths = pad_sequences(targets, prefix=bos_id, pad_id=pad_id)  # (B, T) BOS + target
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with record_attention(model, reference=reference) as recorder:
            encoder_out = model.encode(src.to(device), src_lengths.to(device))
            model.decode(prev.to(device), encoder_out)
        return collect_attention(model, recorder, src_lengths=src_lengths, tgt_lengths=tgt_lengths)
    finally:
        model.train(was_training)


def force_decode_sentences(model: nn.Module, sources: Sequence[torch.Tensor], targets: Sequence[torch.Tensor], *,
                           batch_size: int = 32, **kwargs) -> Iterator[SentenceRecord]:
    """:func:`force_decode` in batches of ``batch_size``; yields one :class:`SentenceRecord` per pair, in order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, len(sources), batch_size):
        record = force_decode(model, sources[start:start + batch_size], targets[start:start + batch_size], **kwargs)
        for index in range(record.batch_size):
            yield record.sentence(index)


def encode_words(tokenizer, words: Sequence[str]) -> tuple[list[int], list[int]]:
    """Subword ids of ``words`` encoded one by one (as SentencePiece does after splitting on whitespace) and the
    0-based word index of each piece."""
    ids: list[int] = []
    word_ids: list[int] = []
    for index, word in enumerate(words):
        pieces = tokenizer.encode(word)
        ids += pieces
        word_ids += [index] * len(pieces)
    return ids, word_ids


def alignment_attention_fn(model: nn.Module, src_tokenizer, tgt_tokenizer):
    """The ``attention_fn`` of :func:`mma_nmt.analysis.align_with_model` for ``model``: encodes the gold word lists,
    force-decodes the target and returns the cross-attention of every decoder layer (L, H, T, S) with the word id of
    each source piece and of each target row (the EOS row gets -1)."""

    def attention(source_words: list[str], target_words: list[str]) -> dict[str, torch.Tensor]:
        src_ids, src_words = encode_words(src_tokenizer, source_words)
        tgt_ids, tgt_words = encode_words(tgt_tokenizer, target_words)
        record = force_decode(model, [torch.tensor(src_ids)], [torch.tensor(tgt_ids)], bos_id=tgt_tokenizer.bos_id)
        return {"cross_attention": record.sentence(0).cross,
                "source_word_ids": torch.tensor(src_words, dtype=torch.int64),
                "target_word_ids": torch.tensor(tgt_words + [-1], dtype=torch.int64)}

    return attention


def sentence_maps(record: SentenceRecord, *, source_tokens: Sequence[str], target_tokens: Sequence[str]
                  ) -> SentenceAttention:
    """The :class:`~mma_nmt.analysis.SentenceAttention` of one force-decoded sentence, for
    :func:`~mma_nmt.analysis.plot_sentence_attention`. ``target_tokens`` label the decoder positions by the token each
    one predicts (the target pieces, then ``</s>``), so there are ``record.target_length`` of them."""
    if len(source_tokens) != record.source_length or len(target_tokens) != record.target_length:
        raise ValueError(f"{len(source_tokens)} source and {len(target_tokens)} target tokens for a record of "
                         f"{record.source_length} source and {record.target_length} decoder positions")
    kinds = set(record.encoder_head_kinds)
    if len(kinds) > 1:
        raise ValueError(f"encoder layers have different head kinds {record.encoder_head_kinds}; plot them one "
                         f"layer at a time with plot_attention_grid")
    return SentenceAttention(source_tokens=list(source_tokens), target_tokens=list(target_tokens),
                             encoder_self=record.encoder_self, decoder_self=record.decoder_self, cross=record.cross,
                             encoder_head_kinds=kinds.pop() if kinds else None)


def pieces(tokenizer, ids) -> list[str]:
    """The subword piece of each id (for axis labels)."""
    return [tokenizer.id_to_piece(int(i)) for i in ids]
