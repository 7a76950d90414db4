"""Small file helpers shared by the data pipeline: atomic writes and reading plain or gzip text as (byte) lines."""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import torch


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_current_umask()


def _temp_beside(path: Path) -> tuple[int, str]:
    """A temporary file in the same directory as ``path`` (so that ``os.replace`` is an atomic rename), with the
    permissions a normally created file would get (``mkstemp`` would leave it 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, _FILE_MODE)
    return fd, tmp


class NoSpaceLeft(OSError):
    """A write that failed for want of space (``ENOSPC`` or ``EDQUOT``), whatever layer reported it: ``str()`` is one
    line naming the directory and the file."""

    def __init__(self, path: Path):
        self.path = path
        super().__init__(errno.ENOSPC, f"no space left on {path.parent} (writing {path.name}; the file is unchanged "
                                       f"and the partial temporary file removed): free some space and run again")

    def __str__(self) -> str:
        return self.strerror


def _underlying(error: BaseException | None, kind: Callable[[BaseException], bool]) -> bool:
    """Whether ``error`` or one it was raised from or during is of ``kind``: torch's archive writer turns an exception
    of the file's ``write`` (the ``OSError`` of a full disk, the ``KeyboardInterrupt`` of a Ctrl-C) into
    ``RuntimeError("[enforce fail at inline_container.cc] ... unexpected pos")`` raised during it."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if kind(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _out_of_space(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def atomic_write_with(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Calls ``write(handle)`` on a temporary file beside ``path``, fsyncs it and renames it over ``path``: readers see
    the old file or the new one, never a partial file (streams, so large payloads are not held in memory twice). A full
    disk raises :class:`NoSpaceLeft`, a Ctrl-C ``KeyboardInterrupt`` (whatever ``write`` made of them); the temporary
    file is removed on any failure."""
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(error, Exception) and _underlying(error, lambda e: isinstance(e, KeyboardInterrupt)):
            raise KeyboardInterrupt from error  # Ctrl-C stays Ctrl-C
        if _underlying(error, _out_of_space) and not isinstance(error, NoSpaceLeft):
            raise NoSpaceLeft(path) from error
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Writes ``data`` to ``path`` through a temporary file and ``os.replace``: readers see the old file or the new one."""
    return atomic_write_with(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Writes ``obj`` as indented, key-sorted JSON, atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def atomic_write_lines(path: str | os.PathLike, lines: list[str], *, compress: bool = False) -> Path:
    """Writes one string per line (each must hold no ``\\n``), optionally gzip-compressed, atomically."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if compress:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return atomic_write_bytes(path, data)


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """``torch.save`` into a buffer, then an atomic write."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def open_binary(path: str | os.PathLike) -> BinaryIO:
    """Opens a plain or gzip file (decided by its magic bytes, not its name) for binary reading."""
    path = Path(path)
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32 LE"), (b"\x00\x00\xfe\xff", "UTF-32 BE"), (b"\xff\xfe", "UTF-16 LE"),
              (b"\xfe\xff", "UTF-16 BE"))


def wide_encoding(path: str | os.PathLike, sample: int = 4096) -> str | None:
    """What a (plain or gzip) text file that is UTF-16 or UTF-32 rather than UTF-8 looks like, from its first bytes:
    ``"UTF-16 LE (byte order mark FF FE)"``, ``"UTF-16 BE (NUL bytes before its characters)"`` ..., or None. UTF-16 of
    ASCII text is valid UTF-8 (each character followed or preceded by a NUL byte), so it must be caught by its shape:
    a byte order mark, or NUL bytes at every other offset."""
    try:
        with open_binary(path) as handle:
            head = handle.read(sample)
    except (EOFError, gzip.BadGzipFile, OSError):
        return None  # unreadable: iter_byte_lines says so, naming the file
    for bom, name in _WIDE_BOMS:
        if head.startswith(bom):
            return f"{name} (byte order mark {bom.hex(' ').upper()})"
    pairs = len(head) // 2
    if pairs < 2:
        return None
    even = head[0:2 * pairs:2].count(0)  # NULs at even offsets: the high byte first (big-endian)
    odd = head[1:2 * pairs:2].count(0)
    if odd >= 0.4 * pairs and even <= 0.05 * pairs:
        return "UTF-16 LE (a NUL byte after each character)"
    if even >= 0.4 * pairs and odd <= 0.05 * pairs:
        return "UTF-16 BE (a NUL byte before each character)"
    return None


def not_utf8_message(path: str | os.PathLike, encoding: str) -> str:
    """Why a UTF-16/32 file is refused, and how to convert it."""
    family = encoding.split()[0]
    return (f"{path} looks like {encoding}, not UTF-8 text: convert it first, e.g. iconv -f {family} -t UTF-8 "
            f"{path} > {Path(path).name}.utf8")


def iter_byte_lines(path: str | os.PathLike) -> Iterator[bytes]:
    """Yields the lines of a plain or gzip file as bytes without their ``\\n``.

    Only ``\\n`` ends a line (unlike ``str.splitlines``, which also splits on ``\\r``, ``\\x0b``, U+2028 ...), so line
    numbers match ``wc -l``/``sed -n Np``. A truncated or corrupt gzip stream raises ``OSError`` naming the file.
    """
    try:
        with open_binary(path) as handle:
            for raw in handle:
                yield raw[:-1] if raw.endswith(b"\n") else raw
    except (EOFError, gzip.BadGzipFile, OSError) as error:
        raise OSError(f"{path}: cannot read compressed/plain text: {error}") from error


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a plain or gzip UTF-8 text file (one sentence per line), without their ``\\n``.

    The one reader of the command line's text files (sources to translate, hypotheses, references) and of the analysis
    data: only ``\\n`` ends a line, a Windows ``\\r`` before it is dropped, and a last line without a final newline is
    kept (``"a\\nb"`` is two lines, as is ``"a\\nb\\n"``). Invalid UTF-8 raises ``ValueError`` naming the file and line, as
    does a UTF-16/32 file (:func:`wide_encoding`).
    """
    encoding = wide_encoding(path)
    if encoding is not None:
        raise ValueError(not_utf8_message(path, encoding))
    lines = []
    for number, raw in enumerate(iter_byte_lines(path), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}:{number}: invalid UTF-8 at byte {error.start}") from error
        lines.append(line[:-1] if line.endswith("\r") else line)
    return lines


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_gzip_lines(path: str | os.PathLike) -> Iterator[Callable[[str | bytes], None]]:
    """Context manager yielding ``write(line)`` that streams lines (str as UTF-8, or raw bytes) into a gzip file,
    renamed into place on success."""
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as out:
            yield lambda line: out.write((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
