"""Where a notebook's figures go, and how it shows them: saved as PNG under the notebook's output folder and displayed
from that file, so the same cell works in Jupyter and when the notebook is executed headless (CI)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

OUT_ENV = "MMA_NMT_NOTEBOOK_OUT"


def figure_dir(notebook: str) -> Path:
    """``$MMA_NMT_NOTEBOOK_OUT``, else ``../runs/notebooks/<notebook>`` (relative to the notebook's folder)."""
    return Path(os.environ.get(OUT_ENV, f"../runs/notebooks/{notebook}"))


def figure_shower(out: Path) -> Callable[[object, str], None]:
    """``show(fig, name)``: saves ``fig`` as ``out / name`` and displays the PNG."""
    from IPython.display import Image, display  # notebooks only: the library itself does not need IPython

    from mma_nmt.analysis import save_figure

    def show(fig, name: str) -> None:
        display(Image(filename=str(save_figure(fig, out / name))))

    return show


def show_bleu_by_source_length(show: Callable[[object, str], None], test, hypotheses: dict[str, list[str]]) -> dict:
    """sacreBLEU per source-length bucket of every system's ``hypotheses`` of the first sentences of ``test`` (a
    ParallelDataset): shown as ``bleu_by_length.png``, printed per bucket, and returned (system -> bucket rows)."""
    from mma_nmt.analysis import bleu_by_source_length, plot_bleu_by_source_length

    count = len(next(iter(hypotheses.values())))
    systems = {name: bleu_by_source_length(test.src_text[:count], hyps, test.tgt_text[:count])
               for name, hyps in hypotheses.items()}
    show(plot_bleu_by_source_length(systems, title=f"BLEU by source length ({count} test sentences, greedy)"),
         "bleu_by_length.png")
    from sacrebleu.metrics import BLEU

    for name, rows in systems.items():
        overall = BLEU().corpus_score(hypotheses[name], [test.tgt_text[:count]]).score
        print(f"{name}: BLEU {overall:.2f} over these {count} sentences (greedy);",
              [(r.label, r.sentences, None if r.bleu is None else round(r.bleu, 2)) for r in rows])
    return systems


def show_attention_explorer(out: Path, test, records: Sequence, *, title: str, count: int = 8,
                            extra: Callable[[int, object], dict] | None = None) -> Path:
    """Displays the interactive attention view (:mod:`mma_nmt.analysis.attention_explorer`) of the first ``count``
    force-decoded ``records`` of ``test`` (a ParallelDataset, records in its order) and writes it to
    ``out / "attention_explorer.html"``. ``extra(i, record)`` may add blocks to sentence ``i``."""
    from IPython.display import HTML, display

    from mma_nmt.analysis.attention_explorer import attention_explorer_html, explorer_sentence, write_attention_explorer
    from mma_nmt.evaluation.force_decode import pieces, sentence_maps

    sentences = []
    for i, record in enumerate(records[:count]):
        maps = sentence_maps(record, source_tokens=pieces(test.src_tokenizer, test.src[i]),
                             target_tokens=pieces(test.tgt_tokenizer, test.tgt[i]) + ["</s>"])
        sentences.append(explorer_sentence(maps, title=test.src_text[i], extra=extra(i, record) if extra else None))
    display(HTML(attention_explorer_html(sentences, title=title)))
    return write_attention_explorer(sentences, Path(out) / "attention_explorer.html", title=title)
