"""Resumable, checksum-verified downloads of corpus files.

A file is fetched to ``<name>.part`` and renamed to ``<name>`` only once it is complete and its sha256 (when known)
matches, so an interrupted download never leaves a file that looks finished. A later call resumes the ``.part`` with an
HTTP ``Range`` request when the server supports it (206) and starts over otherwise (200). A resumed file whose checksum
fails is discarded and fetched once more from the start.

A mirror (``mirror="http://host/base"`` or the ``MMA_NMT_DOWNLOAD_MIRROR`` environment variable) replaces the origin:
``https://example.org/a/b.gz`` is then fetched from ``http://host/base/example.org/a/b.gz``.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from tqdm import tqdm

from mma_nmt.data.fileio import sha256_file

MIRROR_ENV = "MMA_NMT_DOWNLOAD_MIRROR"
_CHUNK = 1 << 20
_USER_AGENT = "mma_nmt-data/0.1 (+https://pypi.org/project/mma_nmt)"


class DownloadError(RuntimeError):
    """A download failed for good (HTTP error, checksum mismatch, truncated body after the retries)."""


@dataclass(frozen=True)
class RemoteFile:
    """One file at its original public location.

    Attributes:
        url: the original public URL.
        filename: the name to store it under (inside the download directory).
        sha256: the expected hex digest of the file's bytes, or None where no reference digest is known.
    """

    url: str
    filename: str
    sha256: str | None = None


def mirrored_url(url: str, mirror: str | None = None) -> str:
    """``url`` as served by ``mirror`` (or by ``$MMA_NMT_DOWNLOAD_MIRROR``); unchanged when there is no mirror."""
    mirror = mirror or os.environ.get(MIRROR_ENV)
    if not mirror:
        return url
    parsed = urlparse(url)
    return f"{mirror.rstrip('/')}/{parsed.netloc}{parsed.path}"


def download(remote: RemoteFile, dest_dir: str | os.PathLike, *, mirror: str | None = None, retries: int = 3,
             timeout: float = 60.0, backoff: float = 2.0, progress: bool = True) -> Path:
    """Downloads ``remote`` into ``dest_dir/remote.filename`` unless it is already there (and verifies it).

    Transient failures (connection errors, 5xx, a truncated body) are retried up to ``retries`` times, resuming the
    ``.part``, waiting ``backoff ** attempt`` seconds in between (0 = no wait). Returns the final path.
    Raises :class:`DownloadError` when the checksum does not match or the server keeps failing.
    """
    dest = Path(dest_dir) / remote.filename
    if dest.is_file():
        try:
            _verify(dest, remote, digest=None)
        except DownloadError as error:
            raise DownloadError(f"{error}; delete {dest} to download it again") from None
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    url = mirrored_url(remote.url, mirror)
    restarted = False
    for attempt in range(1, retries + 1):
        try:
            digest, resumed = _fetch_to_part(url, part, timeout=timeout, progress=progress)
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, _Truncated) as error:
            if isinstance(error, urllib.error.HTTPError) and error.code not in (408, 429, 500, 502, 503, 504):
                raise DownloadError(f"{url}: HTTP {error.code} {error.reason}") from error
            if attempt == retries:
                raise DownloadError(f"{url}: failed after {retries} attempts: {error} (partial data kept in {part})") \
                    from error
            time.sleep(min(backoff ** attempt, 10.0) if backoff > 0 else 0.0)
            continue
        try:
            _verify(part, remote, digest=digest, shown_as=dest)
        except DownloadError:
            part.unlink(missing_ok=True)
            if not resumed or restarted:
                raise
            restarted = True  # the resumed .part may have been stale: start over once
            continue
        os.replace(part, dest)
        return dest
    raise DownloadError(f"{url}: could not be downloaded to {dest}")


class _Truncated(Exception):
    """The body ended before Content-Length bytes arrived."""


def _fetch_to_part(url: str, part: Path, *, timeout: float, progress: bool) -> tuple[str, bool]:
    """Fetches ``url`` into ``part``, resuming from its current size when possible.

    Returns (sha256 of the whole file, whether earlier bytes of ``part`` were kept)."""
    have = part.stat().st_size if part.is_file() else 0
    headers = {"User-Agent": _USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:  # nothing left to send: the .part is already complete
            return sha256_file(part), True
        raise
    with response:
        resuming = have and response.status == 206
        hasher = _hasher_over(part) if resuming else hashlib.sha256()
        length = response.headers.get("Content-Length")
        expected = int(length) if length is not None else None
        received = _stream(response, part, hasher, append=bool(resuming), total=expected,
                           start=have if resuming else 0, progress=progress, name=part.name[:-5])
    if expected is not None and received < expected:
        raise _Truncated(f"received {received} of {expected} bytes")
    return hasher.hexdigest(), bool(resuming)


def _stream(response, part: Path, hasher, *, append: bool, total: int | None, start: int, progress: bool,
            name: str) -> int:
    """Copies the response body into ``part`` (appending or truncating), updating ``hasher``. Returns bytes received."""
    received = 0
    with open(part, "ab" if append else "wb") as out, tqdm(total=None if total is None else start + total, initial=start,
                                                          unit="B", unit_scale=True, desc=f"download {name}",
                                                          disable=not progress, mininterval=1.0) as bar:
        while chunk := response.read(_CHUNK):
            out.write(chunk)
            hasher.update(chunk)
            received += len(chunk)
            bar.update(len(chunk))
        out.flush()
        os.fsync(out.fileno())
    return received


def _hasher_over(path: Path):
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    return hasher


def _verify(path: Path, remote: RemoteFile, *, digest: str | None, shown_as: Path | None = None) -> None:
    """Raises DownloadError when ``remote.sha256`` is known and differs from the file's digest."""
    if remote.sha256 is None:
        return
    actual = digest or sha256_file(path)
    if actual != remote.sha256:
        raise DownloadError(f"{shown_as or path}: sha256 {actual} does not match the expected {remote.sha256} "
                            f"for {remote.url} (the file was corrupted or changed upstream)")
