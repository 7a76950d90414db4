"""Downloads against a local HTTP server on 127.0.0.1 that mirrors the original hosts with the shared corpus copies.

No test reaches the internet: every URL is rewritten to the local mirror (``mirror=`` or MMA_NMT_DOWNLOAD_MIRROR).
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import shutil
import threading
from urllib.parse import urlparse

import pytest

from mma_nmt.data import DownloadError, ParallelDataset, PrepareConfig, RemoteFile, download, prepare
from mma_nmt.data.corpora import CORPORA, default_data_dir
from mma_nmt.data.download import mirrored_url
from mma_nmt.data.sources import fetch_corpus

DATA = default_data_dir()
pytestmark = pytest.mark.skipif(not (DATA / "multi30k").is_dir(), reason=f"shared corpora not found at {DATA}")


class MirrorHandler(http.server.BaseHTTPRequestHandler):
    """Serves files under ``server.root``; honours ``Range: bytes=N-`` when ``server.ranges``; can cut bodies short."""

    def do_GET(self):  # noqa: N802 (http.server naming)
        server = self.server
        server.requests.append((self.path, self.headers.get("Range")))
        path = server.root / self.path.lstrip("/")
        if not path.is_file():
            self.send_error(404, "not found")
            return
        body, status = path.read_bytes(), 200
        requested = self.headers.get("Range")
        start = int(requested.split("=")[1].rstrip("-")) if requested and server.ranges else 0
        if requested and server.ranges:
            if start >= len(body):
                self.send_error(416, "range not satisfiable")
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        payload = body[start:]
        if server.cut_next:  # send half of the body, then drop the connection
            server.cut_next -= 1
            payload = payload[: len(payload) // 2]
            self.close_connection = True
        self.wfile.write(payload)

    def log_message(self, *args):  # keep test output quiet
        pass


@pytest.fixture
def mirror(tmp_path):
    """A running local mirror: yields (base_url, server); put files with :func:`publish`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MirrorHandler)
    server.root, server.requests, server.ranges, server.cut_next = tmp_path / "mirror", [], True, 0
    server.root.mkdir()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", server
    server.shutdown()
    server.server_close()


def publish(server, url: str, data: bytes) -> None:
    parsed = urlparse(url)
    target = server.root / parsed.netloc / parsed.path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def publish_corpus(server, name: str) -> None:
    """Publishes the shared copy of every remote file of a 'direct' corpus (gz as is; plain ones decompressed)."""
    spec = CORPORA[name]
    folder = DATA / spec.local_folder
    for remote in spec.remote_files:
        local = folder / remote.filename
        data = local.read_bytes() if local.is_file() else gzip.decompress((folder / f"{remote.filename}.gz").read_bytes())
        publish(server, remote.url, data)


def multi30k_remote(name: str = "val.de.gz") -> RemoteFile:
    return next(r for r in CORPORA["multi30k_de_en"].remote_files if r.filename == name)


def test_download_from_mirror_verifies_sha256(mirror, tmp_path):
    base, server = mirror
    publish_corpus(server, "multi30k_de_en")
    remote = multi30k_remote()
    path = download(remote, tmp_path / "dl", mirror=base, progress=False)
    assert path.read_bytes() == (DATA / "multi30k" / "val.de.gz").read_bytes()
    assert not (tmp_path / "dl" / "val.de.gz.part").exists()
    assert server.requests == [(urlparse(mirrored_url(remote.url, base)).path, None)]
    download(remote, tmp_path / "dl", mirror=base, progress=False)  # present and valid: no request
    assert len(server.requests) == 1


def test_partial_download_resumes_with_a_range_request(mirror, tmp_path):
    base, server = mirror
    publish_corpus(server, "multi30k_de_en")
    data = (DATA / "multi30k" / "val.de.gz").read_bytes()
    (tmp_path / "val.de.gz.part").write_bytes(data[:10_000])
    path = download(multi30k_remote(), tmp_path, mirror=base, progress=False)
    assert path.read_bytes() == data
    assert server.requests[0][1] == "bytes=10000-"


def test_server_without_ranges_restarts_from_zero(mirror, tmp_path):
    base, server = mirror
    server.ranges = False
    publish_corpus(server, "multi30k_de_en")
    (tmp_path / "val.de.gz.part").write_bytes(b"stale bytes from an older attempt")
    assert download(multi30k_remote(), tmp_path, mirror=base, progress=False).read_bytes() == \
        (DATA / "multi30k" / "val.de.gz").read_bytes()


def test_stale_part_failing_the_checksum_is_refetched_whole(mirror, tmp_path):
    base, server = mirror
    publish_corpus(server, "multi30k_de_en")
    data = (DATA / "multi30k" / "val.de.gz").read_bytes()
    (tmp_path / "val.de.gz.part").write_bytes(b"\0" * 5000)
    assert download(multi30k_remote(), tmp_path, mirror=base, progress=False).read_bytes() == data
    assert [r[1] for r in server.requests] == ["bytes=5000-", None]


def test_connection_cut_mid_body_is_resumed(mirror, tmp_path):
    base, server = mirror
    publish_corpus(server, "multi30k_de_en")
    server.cut_next = 1
    path = download(multi30k_remote("train.en.gz"), tmp_path, mirror=base, progress=False, backoff=0)
    assert path.read_bytes() == (DATA / "multi30k" / "train.en.gz").read_bytes()
    assert len(server.requests) == 2 and server.requests[1][1].startswith("bytes=")


def test_checksum_mismatch_raises_and_leaves_nothing(mirror, tmp_path):
    base, server = mirror
    remote = RemoteFile("https://example.org/files/x.gz", "x.gz", hashlib.sha256(b"expected").hexdigest())
    publish(server, remote.url, b"something else")
    with pytest.raises(DownloadError, match="sha256 .* does not match the expected"):
        download(remote, tmp_path / "dl", mirror=base, progress=False)
    assert list((tmp_path / "dl").iterdir()) == []


def test_missing_file_is_an_http_error(mirror, tmp_path):
    base, _ = mirror
    with pytest.raises(DownloadError, match="HTTP 404"):
        download(RemoteFile("https://example.org/none.gz", "none.gz"), tmp_path, mirror=base, progress=False)


def test_fetch_multi30k_with_mirror_env_var(mirror, tmp_path, monkeypatch):
    base, server = mirror
    publish_corpus(server, "multi30k_de_en")
    monkeypatch.setenv("MMA_NMT_DOWNLOAD_MIRROR", base)
    folder = fetch_corpus(CORPORA["multi30k_en_de"], tmp_path / "data", progress=False)
    for name in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            assert (folder / f"{name}.{lang}.gz").read_bytes() == (DATA / "multi30k" / f"{name}.{lang}.gz").read_bytes()
    count = len(server.requests)
    fetch_corpus(CORPORA["multi30k_en_de"], tmp_path / "data", progress=False)  # complete: nothing fetched
    assert len(server.requests) == count == 12


def test_prepare_downloads_missing_corpus_then_reuses_it(mirror, tmp_path):
    base, server = mirror
    publish_corpus(server, "small_enja_en_ja")
    config = dict(corpus="small_enja_ja_en", data_dir=str(tmp_path / "empty"), download=True, mirror=base,
                  max_train_lines=1000, vocab_size=1000, splits=("train", "valid"), progress=False)
    out = prepare(PrepareConfig(out_dir=str(tmp_path / "out"), **config))
    assert sorted(p.name for p in (tmp_path / "empty" / "small_parallel_enja").iterdir()) == \
        ["dev.en", "dev.ja", "test.en", "test.ja", "train.en", "train.ja"]
    valid = ParallelDataset.load(out, "valid")
    with gzip.open(DATA / "small_parallel_enja" / "dev.en.gz", "rt", encoding="utf-8") as handle:
        assert valid.tgt_text == handle.read().split("\n")[:-1]
    requests = len(server.requests)
    prepare(PrepareConfig(out_dir=str(tmp_path / "out2"), **config))
    assert len(server.requests) == requests


def test_without_download_a_missing_corpus_is_not_fetched(mirror, tmp_path):
    base, server = mirror
    with pytest.raises(FileNotFoundError, match="download=True"):
        prepare(PrepareConfig(corpus="small_enja_en_ja", data_dir=str(tmp_path / "empty"), mirror=base,
                              out_dir=str(tmp_path / "out"), progress=False))
    assert server.requests == []


def _xml(segments: list[str]) -> bytes:
    import html
    body = "".join(f'<seg id="{i}"> {html.escape(s, quote=False)} </seg>\n' for i, s in enumerate(segments, 1))
    return f'<mteval>\n<srcset setid="x">\n<doc docid="1">\n{body}</doc>\n</srcset>\n</mteval>\n'.encode()


def test_iwslt17_archive_is_rebuilt_into_the_shared_layout(mirror, tmp_path):
    """A WIT3-style zip made from the shared IWSLT17 text: extraction must give the shared files back line for line."""
    import zipfile
    base, server = mirror
    spec = CORPORA["iwslt17_de_en"]
    lines = {f"{split}.{lang}": gzip.decompress((DATA / "iwslt17_de_en" / f"{split}.{lang}.gz").read_bytes())
             .decode().split("\n")[:-1] for split in ("valid", "test") for lang in ("de", "en")}
    archive = tmp_path / "de-en.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for lang in ("de", "en"):
            tags = ["<url>http://www.ted.com/talks/x</url>", "<keywords>talks</keywords>", "<talkid>1</talkid>"]
            zf.writestr(f"de-en/train.tags.de-en.{lang}", "\n".join(tags + lines[f"valid.{lang}"][:50]) + "\n")
            zf.writestr(f"de-en/IWSLT17.TED.dev2010.de-en.{lang}.xml", _xml(lines[f"valid.{lang}"]))
            test, step = lines[f"test.{lang}"], -(-len(lines[f"test.{lang}"]) // 6)
            for k, year in enumerate(range(2010, 2016)):
                zf.writestr(f"de-en/IWSLT17.TED.tst{year}.de-en.{lang}.xml", _xml(test[k * step:(k + 1) * step]))
    publish(server, spec.remote_files[0].url, archive.read_bytes())
    folder = fetch_corpus(spec, tmp_path / "data", mirror=base, progress=False)
    for name, expected in lines.items():
        got = gzip.decompress((folder / f"{name}.gz").read_bytes()).decode().split("\n")[:-1]
        assert got == expected, name
    train_de = gzip.decompress((folder / "train.de.gz").read_bytes()).decode().split("\n")[:-1]
    assert train_de == lines["valid.de"][:50]
    assert (folder / "downloads" / "de-en.zip").is_file()
    shutil.rmtree(folder / "downloads")
