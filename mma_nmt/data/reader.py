"""Reading line-aligned parallel text with a documented policy for malformed lines.

Problems found, per line of either file (``kind`` names used in reports and errors):

- ``invalid_utf8``: the line's bytes are not UTF-8.
- ``empty_line``: the line is empty or only whitespace.
- ``line_too_long``: the line has more than ``max_line_chars`` characters.
- ``windows_line_ending``: the line ends in ``\\r\\n``.
- ``line_count_mismatch``: one file has lines past the end of the other.
- ``nul_byte``: the line holds a NUL byte (binary data; UTF-8 text has none).

A file that is UTF-16 or UTF-32 rather than UTF-8 (a byte order mark, or NUL bytes at every other offset: UTF-16 of
ASCII text is valid UTF-8) is refused whole under both policies (``DataFormatError`` of kind ``not_utf8``, naming the
file and the likely encoding).

``on_error="fail"`` raises :class:`DataFormatError` (``path:line: kind: detail``) at the first problem.
``on_error="skip"`` drops every pair with a problem on either side (the ``\\r`` of a Windows line ending is removed instead
and the pair kept; the extra lines of the longer file are dropped) and counts each problem in :class:`ReadReport`, which
also keeps the first messages of each kind with their ``path:line``. A UTF-8 byte order mark at the start of a file is
removed under both policies and counted as ``bom``. Surrounding whitespace of every line is trimmed.
"""

from __future__ import annotations

import itertools
import os
import typing
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tqdm import tqdm

from mma_nmt.data.fileio import iter_byte_lines, not_utf8_message, wide_encoding

OnError = Literal["skip", "fail"]
ON_ERROR_POLICIES = typing.get_args(OnError)
DEFAULT_MAX_LINE_CHARS = 10_000
MESSAGES_PER_KIND = 20
REPAIRS = ("windows_line_ending", "bom")  # problems that "skip" repairs instead of dropping the pair


class DataFormatError(ValueError):
    """A malformed line under ``on_error="fail"``; the message starts with ``path:line:``."""

    def __init__(self, path: str | os.PathLike, line: int, kind: str, detail: str):
        self.path, self.line, self.kind = str(path), line, kind
        super().__init__(f"{path}:{line}: {kind}: {detail}")


@dataclass
class ReadReport:
    """What :func:`read_parallel` found: problem counts by kind, the first messages of each kind, and pair totals."""

    src_path: str = ""
    tgt_path: str = ""
    pairs_read: int = 0
    pairs_kept: int = 0
    counts: Counter = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)

    def add(self, kind: str, path: str | os.PathLike, line: int, detail: str, *, lines: int = 1) -> None:
        """Counts ``lines`` occurrences of ``kind`` and keeps the message while fewer than MESSAGES_PER_KIND are kept."""
        self.counts[kind] += lines
        if sum(1 for m in self.messages if f": {kind}: " in m) < MESSAGES_PER_KIND:
            self.messages.append(f"{path}:{line}: {kind}: {detail}")

    @property
    def pairs_skipped(self) -> int:
        return self.pairs_read - self.pairs_kept

    @property
    def clean(self) -> bool:
        """True when no problem of any kind was found."""
        return not self.counts

    def summary(self) -> str:
        """One line: kept/read pairs and the count of each problem kind."""
        problems = ", ".join(f"{kind}={n}" for kind, n in sorted(self.counts.items())) or "no problems"
        return f"{self.src_path} | {self.tgt_path}: kept {self.pairs_kept}/{self.pairs_read} pairs; {problems}"

    def to_dict(self) -> dict:
        return dict(src_path=self.src_path, tgt_path=self.tgt_path, pairs_read=self.pairs_read,
                    pairs_kept=self.pairs_kept, counts=dict(self.counts), messages=list(self.messages))


@dataclass
class ParallelText:
    """Aligned sentences: ``src[i]`` translates to ``tgt[i]``."""

    src: list[str]
    tgt: list[str]
    report: ReadReport

    def __len__(self) -> int:
        return len(self.src)


def _check_line(raw: bytes, number: int, max_line_chars: int) -> tuple[str | None, list[tuple[str, str]]]:
    """Decodes one line. Returns (text or None when unusable, [(kind, detail), ...]) for the problems found."""
    problems: list[tuple[str, str]] = []
    if raw.endswith(b"\r"):
        raw = raw[:-1]
        problems.append(("windows_line_ending", "line ends with \\r\\n (convert with dos2unix, or use on_error='skip' "
                                                "which strips the \\r)"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[error.start:error.start + 4]
        problems.append(("invalid_utf8", f"byte {error.start} ({bad!r}) is not valid UTF-8: {error.reason}"))
        return None, problems
    if number == 1 and text.startswith("\ufeff"):
        text = text[1:]
        problems.append(("bom", "UTF-8 byte order mark removed"))
    if "\x00" in text:
        problems.append(("nul_byte", f"NUL byte at character {text.index(chr(0))} (binary data, or UTF-16 text?)"))
        return None, problems
    text = text.strip()
    if not text:
        problems.append(("empty_line", "line is empty or whitespace only"))
        return None, problems
    if len(text) > max_line_chars:
        problems.append(("line_too_long", f"{len(text)} characters > max_line_chars={max_line_chars}"))
        return None, problems
    return text, problems


def _record(report: ReadReport, path: Path, number: int, problems: list[tuple[str, str]], on_error: str) -> bool:
    """Reports ``problems`` of one line; raises under "fail" (except for a BOM). Returns True if the pair must be dropped."""
    drop = False
    for kind, detail in problems:
        if on_error == "fail" and kind != "bom":
            raise DataFormatError(path, number, kind, detail)
        report.add(kind, path, number, detail)
        drop = drop or kind not in REPAIRS
    return drop


def _count_rest(lines) -> int:
    return sum(1 for _ in lines)


def _mismatch(report: ReadReport, paths: tuple[Path, Path], line: int, rest: tuple[int, int], on_error: str) -> None:
    """Reports lines of one file past the end of the other (``rest`` = lines left in src and tgt after ``line - 1``)."""
    longer = 0 if rest[0] else 1
    totals = (line - 1 + rest[0], line - 1 + rest[1])
    detail = (f"{paths[0]} has {totals[0]} lines but {paths[1]} has {totals[1]}; the files are not line-aligned "
              f"from here on (skip keeps the first {min(totals)} pairs)")
    if on_error == "fail":
        raise DataFormatError(paths[longer], line, "line_count_mismatch", detail)
    report.add("line_count_mismatch", paths[longer], line, detail, lines=abs(totals[0] - totals[1]))


def read_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike, *, on_error: OnError = "skip",
                  max_line_chars: int = DEFAULT_MAX_LINE_CHARS, max_lines: int | None = None,
                  progress: bool = False) -> ParallelText:
    """Reads two line-aligned text files (plain or gzip, UTF-8) into sentence pairs.

    Args:
        src_path, tgt_path: the source and target files; line ``i`` of one translates line ``i`` of the other.
        on_error: ``"skip"`` (drop bad pairs, count them in ``.report``) or ``"fail"`` (raise ``DataFormatError`` with
            ``path:line``). See the module docstring for the problem kinds.
        max_line_chars: longer lines (after trimming) are ``line_too_long``.
        max_lines: read only the first ``max_lines`` pairs (line-count mismatch past them is not checked).
        progress: show a tqdm counter.
    """
    if on_error not in ON_ERROR_POLICIES:
        raise ValueError(f"on_error must be one of {ON_ERROR_POLICIES}, got {on_error!r}")
    paths = (Path(src_path), Path(tgt_path))
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        encoding = wide_encoding(path)
        if encoding is not None:  # refused under both policies: every line would be garbage
            raise DataFormatError(path, 1, "not_utf8", not_utf8_message(path, encoding))
    report = ReadReport(src_path=str(paths[0]), tgt_path=str(paths[1]))
    src: list[str] = []
    tgt: list[str] = []
    lines = (iter_byte_lines(paths[0]), iter_byte_lines(paths[1]))
    pairs = itertools.zip_longest(*lines)  # None marks the end of the shorter file
    if max_lines is not None:
        pairs = itertools.islice(pairs, max_lines)
    # One counter line, refreshed at most once a second and cleared at the end (leave=False: no line of its own, so a
    # command's stderr stays its one-line error). It is drawn once more with the final count first: a log, which no
    # terminal clears, used to keep its first state, "read train.de.gz: 0 lines".
    with tqdm(desc=f"read {paths[0].name}", unit=" lines", disable=not progress, mininterval=1.0,
              leave=False) as counter:
        for number, (raw_src, raw_tgt) in enumerate(pairs, start=1):
            if raw_src is None or raw_tgt is None:
                rest = (int(raw_src is not None) + _count_rest(lines[0]),
                        int(raw_tgt is not None) + _count_rest(lines[1]))
                _mismatch(report, paths, number, rest, on_error)
                break
            report.pairs_read += 1
            text_src, problems_src = _check_line(raw_src, number, max_line_chars)
            text_tgt, problems_tgt = _check_line(raw_tgt, number, max_line_chars)
            drop = _record(report, paths[0], number, problems_src, on_error)
            drop = _record(report, paths[1], number, problems_tgt, on_error) or drop
            if not drop:
                src.append(text_src)  # type: ignore[arg-type]
                tgt.append(text_tgt)  # type: ignore[arg-type]
            counter.update()
        counter.refresh()
    report.pairs_kept = len(src)
    return ParallelText(src=src, tgt=tgt, report=report)

