"""mannlab.data.download: local copies, cache hits, verified atomic downloads (no network)."""

import hashlib
import io
import tarfile
import zipfile

import pytest

from mannlab.data.download import RemoteFile, data_root, locate, read_members
from mannlab.errors import DataError

PAYLOAD = b"hello data\n" * 10
GOOD = RemoteFile("https://example.invalid/files/data.bin", sha256=hashlib.sha256(PAYLOAD).hexdigest())


def serve(payload, calls):
    def fetch(url, path):
        calls.append(url)
        path.write_bytes(payload)

    return fetch


def test_download_verified_then_cached(tmp_path):
    calls = []
    path = locate("demo", GOOD, str(tmp_path), fetch=serve(PAYLOAD, calls), download=True)
    assert path == tmp_path / "demo" / "data.bin" and path.read_bytes() == PAYLOAD
    again = locate("demo", GOOD, str(tmp_path), fetch=serve(b"other", calls), download=True)
    assert again == path and calls == [GOOD.url]  # the cache hit did not fetch


def test_bad_checksum_rejected_and_nothing_left(tmp_path):
    with pytest.raises(DataError, match="SHA256 .* does not match"):
        locate("demo", GOOD, str(tmp_path), fetch=serve(b"corrupt", []), download=True)
    assert list((tmp_path / "demo").iterdir()) == []


def test_md5_checked_when_only_md5_published(tmp_path):
    remote = RemoteFile("https://example.invalid/x.gz", md5=hashlib.md5(PAYLOAD).hexdigest())
    assert (
        locate("demo", remote, str(tmp_path), fetch=serve(PAYLOAD, []), download=True).read_bytes() == PAYLOAD
    )
    with pytest.raises(DataError, match="MD5"):
        locate("other", remote, str(tmp_path), fetch=serve(b"bad", []), download=True)


def test_interrupted_download_leaves_no_partial_file(tmp_path):
    def fail(url, path):
        path.write_bytes(b"half")
        raise ConnectionError("network is unreachable")

    with pytest.raises(DataError, match="offline.*put it at"):
        locate("demo", GOOD, str(tmp_path), fetch=fail, download=True)
    assert list((tmp_path / "demo").iterdir()) == []


def test_env_var_sets_the_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MANNLAB_DATA", str(tmp_path))
    assert data_root() == tmp_path
    (tmp_path / "data.bin").write_bytes(b"local copy, not re-hashed")
    assert locate("demo", GOOD, fetch=serve(PAYLOAD, []), download=True) == tmp_path / "data.bin"


def test_local_file_directory_and_archives(tmp_path):
    archive = tmp_path / "pack.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        info = tarfile.TarInfo("pack/sub/a.txt")
        info.size = len(PAYLOAD)
        tf.addfile(info, io.BytesIO(PAYLOAD))
    assert locate("demo", GOOD, str(archive)) == archive  # a file given as data_dir is used as is
    assert read_members(archive, lambda n: n.endswith("a.txt")) == {"pack/sub/a.txt": PAYLOAD}
    with zipfile.ZipFile(tmp_path / "pack.zip", "w") as zf:
        zf.writestr("pack/a.txt", PAYLOAD)
    assert read_members(tmp_path / "pack.zip", lambda n: True) == {"pack/a.txt": PAYLOAD}
    unpacked = tmp_path / "root" / "demo" / "unpacked"
    (unpacked / "sub").mkdir(parents=True)
    (unpacked / "sub" / "a.txt").write_bytes(PAYLOAD)
    found = locate("demo", GOOD, str(tmp_path / "root"), extracted=("unpacked",))
    assert found == unpacked and read_members(found, lambda n: True) == {"sub/a.txt": PAYLOAD}


def test_corrupt_archive_names_file(tmp_path):
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"\x1f\x8b\x08 not really gzip")
    with pytest.raises(DataError, match="broken.tar.gz.*corrupt"):
        read_members(broken, lambda n: True)


def test_symlinks_out_of_the_data_directory_are_refused(tmp_path):
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.txt").write_bytes(PAYLOAD)
    (outside / "sub" / "a.txt").write_bytes(PAYLOAD)
    root = tmp_path / "root"
    (root / "unpacked").mkdir(parents=True)
    (root / "unpacked" / "a.txt").symlink_to(outside / "secret.txt")
    (root / "unpacked" / "sub").symlink_to(outside / "sub")  # not descended into
    (root / "unpacked" / "b.txt").write_bytes(b"inside")
    (root / "unpacked" / "c.txt").symlink_to(root / "unpacked" / "b.txt")
    with pytest.raises(DataError, match="a.txt resolves to .*secret.txt, outside the data directory"):
        read_members(root / "unpacked", lambda n: True)
    assert read_members(root / "unpacked", lambda n: n != "a.txt") == {"b.txt": b"inside", "c.txt": b"inside"}
    (root / "data.bin").symlink_to(outside / "secret.txt")
    with pytest.raises(DataError, match="data.bin resolves to .*outside the data directory"):
        locate("demo", GOOD, str(root))
    (root / "data.bin").unlink()
    (root / "demo").symlink_to(outside)  # a download would land outside
    with pytest.raises(DataError, match="demo resolves to .*outside the data directory"):
        locate("demo", GOOD, str(root), fetch=serve(PAYLOAD, []), download=True)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt", "sub"]
    # the data directory itself may be a symlink
    (root / "demo").unlink()
    (tmp_path / "link").symlink_to(root)
    assert (
        locate("demo", GOOD, str(tmp_path / "link"), fetch=serve(PAYLOAD, []), download=True).read_bytes()
        == PAYLOAD
    )
    assert read_members(tmp_path / "link" / "unpacked", lambda n: n == "b.txt") == {"b.txt": b"inside"}


def test_unsupported_zip_members_are_data_errors(tmp_path):
    path = tmp_path / "pack.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.txt", PAYLOAD)
    data = bytearray(path.read_bytes())
    for offset in (8, data.rindex(b"PK\x01\x02") + 10):  # compression method: local and central
        data[offset] = 99
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="pack.zip cannot be read .*NotImplementedError"):
        read_members(path, lambda n: True)
