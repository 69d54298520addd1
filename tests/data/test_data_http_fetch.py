"""Downloads over HTTP from a local server (never the network): what is fetched is said in one
line, a cut connection is retried and resumed, a stalled or endless download ends with a
message, a 4xx answer is not retried, and the loaders' tables pin every file."""

import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mannlab.data import babi, download, enwik8, mnist, snli, strokes
from mannlab.data.download import RemoteFile, locate
from mannlab.data.http_fetch import FetchError, FetchLimits, fetch_url
from mannlab.errors import DataError
from mannlab.tasks import charlm

PAYLOAD = bytes(range(256)) * 40
QUICK = FetchLimits(deadline_s=5.0, min_rate=1000.0, window_s=0.3, read_timeout_s=2.0, backoff_s=0.01)


class Handler(BaseHTTPRequestHandler):
    """Paths: /good, /cut-once (half the bytes, then the rest on a Range request), /drip (a
    byte every 50 ms), /missing (404), /busy-once (500, then the file)."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        server = self.server
        server.requests.append((self.path, self.headers.get("Range")))
        count = sum(1 for path, _ in server.requests if path == self.path)
        if self.path == "/missing":
            return self.send_error(404)
        if self.path == "/busy-once" and count == 1:
            return self.send_error(500)
        if self.path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            for byte in PAYLOAD[:100]:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.05)
            return
        start = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers.get("Range") else 0
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(PAYLOAD) - start))
        self.end_headers()
        if self.path == "/cut-once" and count == 1:
            self.wfile.write(PAYLOAD[: len(PAYLOAD) // 2])
            self.close_connection = True
            return
        self.wfile.write(PAYLOAD[start:])


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.requests = []
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_download_says_what_from_where_how_big_and_into_where(server, tmp_path, capsys):
    _, base = server
    remote = RemoteFile(base + "/good", sha256=hashlib.sha256(PAYLOAD).hexdigest(), size=len(PAYLOAD))
    path = locate("demo", remote, tmp_path, download=True)
    assert path.read_bytes() == PAYLOAD
    err = capsys.readouterr().err
    assert f"downloading good (10.2 kB) from {base}/good into {tmp_path / 'demo'}" in err


def test_a_cut_connection_is_retried_from_where_it_stopped(server, tmp_path, capsys):
    httpd, base = server
    fetch_url(base + "/cut-once", tmp_path / "file", QUICK)
    assert (tmp_path / "file").read_bytes() == PAYLOAD
    assert httpd.requests == [("/cut-once", None), ("/cut-once", f"bytes={len(PAYLOAD) // 2}-")]
    assert "retrying" in capsys.readouterr().err


def test_a_server_error_is_retried_a_missing_file_is_not(server, tmp_path):
    httpd, base = server
    fetch_url(base + "/busy-once", tmp_path / "file", QUICK)
    assert (tmp_path / "file").read_bytes() == PAYLOAD
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch_url(base + "/missing", tmp_path / "other", QUICK)
    assert [path for path, _ in httpd.requests].count("/missing") == 1


def test_a_drip_feed_ends_below_the_minimum_rate(server, tmp_path, monkeypatch):
    _, base = server
    monkeypatch.setattr(download, "urlretrieve", lambda url, path: fetch_url(url, path, QUICK))
    began = time.monotonic()
    with pytest.raises(DataError, match=r"could not download .*/drip \(stalled: \d+ bytes in the last"):
        locate("demo", RemoteFile(base + "/drip"), tmp_path, download=True)
    assert time.monotonic() - began < 2.5
    assert list((tmp_path / "demo").iterdir()) == []  # nothing half-written is kept


def test_a_slow_download_ends_at_the_deadline(server, tmp_path):
    _, base = server
    limits = FetchLimits(deadline_s=0.3, min_rate=0.0, window_s=0.1, read_timeout_s=2.0)
    with pytest.raises(FetchError, match="not finished within the deadline of 0 s"):
        fetch_url(base + "/drip", tmp_path / "file", limits)


def test_a_wrong_size_or_an_unpinned_file_is_said(server, tmp_path, capsys):
    _, base = server
    with pytest.raises(DataError, match=f"10,240 bytes, expected {len(PAYLOAD) + 1:,}"):
        locate("demo", RemoteFile(base + "/good", size=len(PAYLOAD) + 1), tmp_path, download=True)
    locate("demo", RemoteFile(base + "/good"), tmp_path, download=True)
    assert f"no SHA-256 is pinned for it (this copy's is {hashlib.sha256(PAYLOAD).hexdigest()})" in (
        capsys.readouterr().err
    )


def test_the_limits_follow_the_environment(monkeypatch):
    monkeypatch.setenv("MANNLAB_DOWNLOAD_DEADLINE", "60")
    monkeypatch.setenv("MANNLAB_DOWNLOAD_MIN_RATE", "not a number")
    limits = FetchLimits()
    assert limits.deadline_s == 60.0 and limits.min_rate == 4096.0  # a bad value keeps the default


def downloadable():
    """Every file a loader may download, by a readable name."""
    files = {f"mnist {k}": v for k, v in mnist.FILES.items()}
    files |= {f"strokes {k}": v for k, v in strokes.NUMPY_FILES.items()}
    files |= {f"ptb {k}": v for k, v in charlm.CORPORA["ptb-char"].items()}
    files |= {"babi": babi.ARCHIVE, "snli": snli.ARCHIVE, "enwik8": enwik8.ARCHIVE}
    files |= {"text8": charlm.CORPORA["text8"]["archive"], "strokes sequences": strokes.SEQUENCES}
    return files


def test_every_download_is_https_and_pinned():
    unpinned = set()
    for name, remote in downloadable().items():
        assert remote.url.startswith("https://"), name
        if remote.sha256 is None:
            unpinned.add(name)
        else:
            assert len(remote.sha256) == 64 and remote.size, name
    # no SHA-256 is published for these and no verified copy was at hand: their sizes are pinned
    assert unpinned == {"babi", "enwik8", "text8", "strokes sequences"}
    assert all(downloadable()[name].size for name in unpinned - {"strokes sequences"})
