"""``Translator.from_pretrained(folder)``: translate raw text with an exported model (or a run directory) in a line.

    from mma_nmt import Translator
    translator = Translator.from_pretrained("examples/mma_multi30k")
    translator.translate(["Ein Hund läuft."])                      # ['A dog runs.']
    translator.translate(["Ein Hund läuft."], nbest=2, return_scores=True)
    record = translator.attention("Ein Hund läuft.", "A dog runs.")  # recorded weights (record mode)

Raw text gets the corpus's word-level preprocessing before SentencePiece, and outputs its postprocessing
(:mod:`mma_nmt.data.text_processing`). See docs/translating.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from mma_nmt.decoding.search import Hypothesis, SearchConfig


@dataclass
class AttentionOf:
    """The recorded attention of one sentence pair and the SentencePiece pieces its axes stand for."""

    source_pieces: list[str]  # S
    target_pieces: list[str]  # T: the target's pieces then "</s>" (the decoder's rows predict them)
    record: object  # mma_nmt.models.recording.SentenceRecord; record.cross is (L_dec, H, T, S)


class Translator:
    """A model with its SentencePiece models, its corpus's word-level processing and its decode defaults."""

    def __init__(self, parts, *, device: torch.device | str = "cpu"):
        from mma_nmt.config_io import from_dict

        self.parts = parts
        self.model, self.src_tokenizer, self.tgt_tokenizer = parts.model, parts.src_tokenizer, parts.tgt_tokenizer
        self.processing = parts.processing
        self.decode = from_dict(SearchConfig, dict(parts.config["decode"]), "decode")
        self.config = parts.config
        self.device = torch.device(device)

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, device: torch.device | str | None = None,
                        checkpoint: str | Path | None = None) -> "Translator":
        """Loads an export (``mma-nmt export``) or a run directory (its run config, checkpoint and prepared data)."""
        from mma_nmt.export import is_export, load_export
        from mma_nmt.run_directory import is_run_directory, load_run_parts

        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        folder = Path(folder)
        if is_export(folder):
            if checkpoint is not None:
                raise ValueError(f"{folder} is an export: it holds one set of weights, no checkpoint to choose")
            return cls(load_export(folder, device=device), device=device)
        if is_run_directory(folder):
            return cls(load_run_parts(folder, checkpoint=checkpoint, device=device), device=device)
        raise FileNotFoundError(f"{folder} is neither an mma_nmt export (config.json + model.safetensors) nor a run "
                                f"directory (best.pt / last.pt)")

    def search_config(self, beam: int | None = None, **decode) -> SearchConfig:
        """The decode defaults with ``beam`` (beam size) and any other :class:`SearchConfig` field replaced."""
        if beam is not None:
            decode["beam_size"] = beam
        return dataclasses.replace(self.decode, **decode)

    def encode(self, texts: list[str], *, preprocessed: bool = False) -> list[torch.Tensor]:
        """Source ids per text (blank texts: no id, translated to an empty line)."""
        from mma_nmt.decoding.translate import blank_lines

        blank = set(blank_lines(texts))
        words = list(texts) if preprocessed else self.processing.source([t for t in texts])
        return [torch.tensor([] if i in blank else self.src_tokenizer.encode(text), dtype=torch.long)
                for i, text in enumerate(words)]

    def hypotheses(self, texts: list[str], *, config: SearchConfig, nbest: int = 1, preprocessed: bool = False,
                   progress: bool = False) -> list[list[tuple[str, Hypothesis]]]:
        """Per text, its ``nbest`` best hypotheses with their postprocessed text, best first."""
        from mma_nmt.decoding.translate import special_ids, translate_ids_nbest

        sources = self.encode(texts, preprocessed=preprocessed)
        found = translate_ids_nbest(self.model, sources, config, special_ids(self.tgt_tokenizer), nbest=nbest,
                                    device=self.device, progress=progress)
        return [list(zip(self.processing.output([self.tgt_tokenizer.decode(h.tokens) for h in hyps]), hyps))
                for hyps in found]

    def translate(self, texts: list[str], beam: int | None = None, nbest: int = 1, return_scores: bool = False, *,
                  preprocessed: bool = False, progress: bool = False, **decode):
        """Translations of raw source sentences, one per text (a blank text gives ""). ``beam``: beam size (default:
        the run's ``decode.beam_size``); other ``decode`` fields by keyword. ``nbest > 1``: a list of up to ``nbest``
        translations per text, best first. ``return_scores``: ``(text, score)`` pairs instead of texts, the score
        being the length-normalised log-probability the search ranks by. ``preprocessed``: the texts are already
        word-level preprocessed as the corpus (only SentencePiece is applied)."""
        if isinstance(texts, str):
            raise TypeError("translate takes a list of sentences; wrap one sentence in a list")
        found = self.hypotheses(list(texts), config=self.search_config(beam, **decode), nbest=nbest,
                                preprocessed=preprocessed, progress=progress)
        shaped = [[(text, hyp.normalized) if return_scores else text for text, hyp in hyps] for hyps in found]
        return shaped if nbest > 1 else [hyps[0] for hyps in shaped]

    def attention(self, source: str, target: str | None = None, *, preprocessed: bool = False) -> AttentionOf:
        """The attention weights of the pair (``source``, ``target``), recorded in record mode on the reference path
        (:mod:`mma_nmt.models.recording`): the model reads the target teacher-forced. Without ``target``, the model's
        own best translation of ``source``."""
        from mma_nmt.evaluation.force_decode import force_decode

        src = self.encode([source], preprocessed=preprocessed)[0]
        if len(src) == 0:
            raise ValueError("attention needs a non-empty source sentence")
        if target is None:
            tgt_ids = self.hypotheses([source], config=self.decode, preprocessed=preprocessed)[0][0][1].tokens
        else:
            words = target if preprocessed else self.processing.target([target])[0]
            tgt_ids = self.tgt_tokenizer.encode(words)
        record = force_decode(self.model, [src], [torch.tensor(tgt_ids, dtype=torch.long)],
                              bos_id=self.tgt_tokenizer.bos_id, pad_id=self.tgt_tokenizer.pad_id).sentence(0)
        return AttentionOf([self.src_tokenizer.id_to_piece(i) for i in src.tolist()],
                           [self.tgt_tokenizer.id_to_piece(i) for i in tgt_ids] + ["</s>"], record)
