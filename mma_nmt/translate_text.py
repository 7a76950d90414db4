"""Translating raw text with a :class:`~mma_nmt.translator.Translator`: a whole file (written atomically) or a
stream (stdin: each batch written and flushed as soon as it is translated), plain or n-best.

Output formats:

- plain: one translation per input line;
- n-best (``nbest`` given): per input line, up to ``nbest`` lines ``INDEX ||| TRANSLATION ||| SCORE``, best first,
  where INDEX is the 0-based input line number and SCORE the length-normalised log-probability beam search ranks by
  (fairseq-style); a blank input line gives the single line ``INDEX |||  ||| 0.0000``.

Blank input lines follow :data:`mma_nmt.decoding.translate.EMPTY_LINE_POLICY` (an empty line out, counted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, TextIO

from mma_nmt.decoding.search import SearchConfig
from mma_nmt.decoding.translate import blank_lines


def output_lines(found: list[list[tuple[str, object]]], nbest: int | None, first_index: int = 0) -> list[str]:
    """The output lines of translated sentences ``found`` (per sentence, its (text, Hypothesis) pairs best first)."""
    if nbest is None:
        return [hyps[0][0] for hyps in found]
    return [f"{first_index + i} ||| {text} ||| {hyp.normalized:.4f}" for i, hyps in enumerate(found)
            for text, hyp in hyps]


def _report_blank(blank: list[int], where: str, say: Callable[[str], None]) -> None:
    """Tells ``say`` which (1-based) input lines were blank."""
    if blank:
        shown = ", ".join(str(i) for i in blank[:10]) + (" ..." if len(blank) > 10 else "")
        say(f"{len(blank)} empty or whitespace-only line(s) of {where} left empty in the output (line {shown})")


def translate_file(translator, input_file: str | Path, output: str | Path, *, config: SearchConfig,
                   nbest: int | None = None, preprocessed: bool = False, progress: bool = False,
                   say: Callable[[str], None] = lambda text: None) -> Path:
    """Translates the lines of ``input_file`` into ``output`` (atomically: the old file or the complete new one)."""
    from mma_nmt.data.fileio import atomic_write_lines, read_text_lines

    texts = read_text_lines(input_file)
    _report_blank([i + 1 for i in blank_lines(texts)], str(input_file), say)
    found = translator.hypotheses(texts, config=config, nbest=nbest or 1, preprocessed=preprocessed,
                                  progress=progress)
    out = Path(output)
    atomic_write_lines(out, output_lines(found, nbest))  # a full disk: NoSpaceLeft names the file, left as it was
    return out


def _batches(lines: Iterable[str], size: int) -> Iterable[list[str]]:
    batch: list[str] = []
    for line in lines:
        batch.append(line.rstrip("\n").rstrip("\r"))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def translate_stream(translator, source: TextIO, sink: TextIO, *, config: SearchConfig, nbest: int | None = None,
                     preprocessed: bool = False, batch_size: int | None = None,
                     say: Callable[[str], None] = lambda text: None) -> int:
    """Translates the lines of ``source`` as they come, ``batch_size`` at a time (default ``config.batch_size``),
    writing and flushing each batch's output to ``sink`` once it is done. Returns the number of lines read."""
    count, blank = 0, []
    for batch in _batches(source, batch_size or config.batch_size):
        found = translator.hypotheses(batch, config=config, nbest=nbest or 1, preprocessed=preprocessed)
        blank += [count + i + 1 for i in blank_lines(batch)]
        for line in output_lines(found, nbest, first_index=count):
            sink.write(line + "\n")
        sink.flush()
        count += len(batch)
    _report_blank(blank, "the input", say)
    return count
