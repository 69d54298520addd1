"""Size limits and unreadable files of the data loaders.

Decompression bombs: tiny crafted archives (a few KB) that expand past a data set's limit,
lowered here through its module constant so the fixtures stay small, must be a DataError
naming the member and saying what was expected, read no further than the limit. Files the
user cannot read must be a DataError naming them, not a bare OSError.
"""

import gzip
import io
import os
import tarfile
import zipfile

import numpy as np
import pytest

from mannlab.data import babi, download, enwik8, mnist, snli, strokes
from mannlab.errors import DataError
from mannlab.tasks import charlm

BOMB = 200_000  # decompressed bytes of the crafted files; limits are lowered below it
LIMIT = 50_000


def tar_gz(path, members: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def zip_file(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


class CountingReader:
    """A stream that counts the bytes handed out, to show a reader stopped at the limit."""

    def __init__(self, data: bytes):
        self.stream, self.given = io.BytesIO(data), 0

    def read(self, n=-1):
        block = self.stream.read(n)
        self.given += len(block)
        return block


# ------------------------------------------------------------ the capped reader


def test_read_capped_stops_at_the_limit():
    stream = CountingReader(b"x" * (10 * download.CHUNK))
    with pytest.raises(DataError, match=r"more than 1,000 bytes when decompressed; expected tiny"):
        download.read_capped(stream, 1000, "src", "tiny")
    assert stream.given == 1001
    assert download.read_capped(io.BytesIO(b"abc"), 3, "src", "x") == b"abc"


# ------------------------------------------------------------ decompression bombs


def test_mnist_gzip_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(mnist, "MAX_BYTES", LIMIT)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(b"\x00" * BOMB))
    assert path.stat().st_size < 2000
    with pytest.raises(
        DataError, match=rf"{path.name}: more than 50,000 bytes when decompressed; expected an MNIST"
    ):
        mnist.read_idx(path)


def test_mnist_limit_holds_the_real_files():
    assert mnist.MAX_BYTES >= 16 + 60_000 * 28 * 28


def test_babi_tar_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(babi, "MAX_FILE_BYTES", LIMIT)
    name = "tasks_1-20_v1-2/en/qa1_single-supporting-fact_train.txt"
    archive = tar_gz(tmp_path / "tasks_1-20_v1-2.tar.gz", {name: b"1 Mary went home.\n" * (BOMB // 18)})
    assert archive.stat().st_size < 5000
    with pytest.raises(
        DataError, match=r"qa1_single-supporting-fact_train.txt: more than 50,000 bytes.*bAbI task files"
    ):
        babi.load_babi([1], "en", data_dir=str(archive), splits=["train"])


def test_babi_total_limit(tmp_path, monkeypatch):
    """Members each within the limit but together past the total are refused too."""
    monkeypatch.setattr(babi, "MAX_TOTAL_BYTES", LIMIT)
    story = b"1 Mary went home.\n2 Where is Mary?\thome\t1\n"
    members = {
        f"tasks_1-20_v1-2/en/qa{t}_{babi.TASK_NAMES[t]}_train.txt": story * (LIMIT // len(story) // 2 + 1)
        for t in (1, 2, 3)
    }
    archive = tar_gz(tmp_path / "tasks_1-20_v1-2.tar.gz", members)
    with pytest.raises(DataError, match=r"the wanted files pass 50,000 bytes together"):
        babi.load_babi([1, 2, 3], "en", data_dir=str(archive), splits=["train"])


def test_babi_directory_file_past_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(babi, "MAX_FILE_BYTES", LIMIT)
    folder = tmp_path / "tasks_1-20_v1-2" / "en"
    folder.mkdir(parents=True)
    (folder / "qa1_single-supporting-fact_train.txt").write_bytes(b"1 a.\n" * (BOMB // 5))
    with pytest.raises(DataError, match=r"more than 50,000 bytes; expected bAbI"):
        babi.load_babi([1], "en", data_dir=str(tmp_path / "tasks_1-20_v1-2"), splits=["train"])


def test_enwik8_zip_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(enwik8, "MAX_BYTES", LIMIT)
    archive = zip_file(tmp_path / "enwik8.zip", {"enwik8": b"a" * BOMB})
    assert archive.stat().st_size < 2000
    with pytest.raises(DataError, match=r"enwik8.zip/enwik8: more than 50,000 bytes when decompressed"):
        enwik8.load_enwik8(str(archive), sizes=(10, 10, 10))


def test_zip_member_that_understates_its_size(tmp_path, monkeypatch):
    """A zip member that declares a small size is read no further than it declares
    (zipfile stops there and its CRC check fails): a DataError, not the whole stream."""
    monkeypatch.setattr(enwik8, "MAX_BYTES", LIMIT)
    archive = zip_file(tmp_path / "enwik8.zip", {"enwik8": b"a" * BOMB})
    data = bytearray(archive.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # uncompressed size fields
        at = data.index(signature) + offset
        data[at : at + 4] = (100).to_bytes(4, "little")
    archive.write_bytes(bytes(data))
    with pytest.raises(DataError):
        enwik8.load_enwik8(str(archive), sizes=(10, 10, 10))


def test_enwik8_bare_file_past_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(enwik8, "MAX_BYTES", LIMIT)
    path = tmp_path / "enwik8"
    path.write_bytes(b"a" * BOMB)
    with pytest.raises(DataError, match=r"enwik8: more than 50,000 bytes; expected the enwik8 corpus"):
        enwik8.load_enwik8(str(path), sizes=(10, 10, 10))


def test_enwik8_limit_grows_with_the_split(tmp_path, monkeypatch):
    monkeypatch.setattr(enwik8, "MAX_BYTES", 10)
    path = tmp_path / "enwik8"
    path.write_bytes(b"abcdefghijklmnopqrstuvwxyz0123")
    assert enwik8.load_enwik8(str(path), sizes=(10, 10, 10))["test"] == b"uvwxyz0123"


def test_snli_zip_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(snli, "MAX_BYTES", LIMIT)
    archive = zip_file(tmp_path / "snli_1.0.zip", {"snli_1.0/snli_1.0_dev.jsonl": b"\n" * BOMB})
    with pytest.raises(DataError, match=r"snli_1.0_dev.jsonl: more than 50,000 bytes.*SNLI"):
        snli.load_snli(["valid"], data_dir=str(archive))


def test_strokes_npy_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(strokes, "MAX_NPY_BYTES", LIMIT)
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((BOMB // 32, 1, 4)))
    archive = tar_gz(tmp_path / "test-padded-leading.tar.gz", {"test-padded-leading.npy": buffer.getvalue()})
    assert archive.stat().st_size < 5000
    with pytest.raises(DataError, match=r"test-padded-leading.npy: more than 50,000 bytes.*stroke array"):
        strokes._load_npy(archive, "test-padded-leading")


def test_strokes_text_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(strokes, "MAX_TEXT_BYTES", LIMIT)
    archive = tar_gz(
        tmp_path / "sequences.tar.gz", {"sequences/testimg-0-inputdata.txt": b"0 0 0 0\n" * BOMB}
    )
    with pytest.raises(DataError, match=r"testimg-0-inputdata.txt: more than 50,000 bytes.*stroke rows"):
        strokes.load_text("test", str(archive))


def test_ptb_archive_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(charlm, "PTB_MAX_BYTES", LIMIT)
    archive = tar_gz(tmp_path / "ptb.tar.gz", {"ptb.char.train.txt": b"a " * BOMB})
    with pytest.raises(DataError, match=r"ptb.char.train.txt: more than 50,000 bytes.*PTB"):
        charlm.load_corpus("ptb-char", archive)


# ------------------------------------------------------------ unreadable files


def deny(monkeypatch):
    """Make every open of the data loaders fail as a file without read permission does."""

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(download, "open", refuse, raising=False)


def write_npy(folder):
    np.save(folder / "test-padded-leading.npy", np.zeros((2, 3, 4)))
    return folder / "test-padded-leading.npy"


def write_enwik8(folder):
    (folder / "enwik8").write_bytes(b"a" * 40)
    return folder / "enwik8"


def write_idx_gz(folder):
    (folder / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\0"))
    return folder / "train-images-idx3-ubyte.gz"


def load_enwik8(path):
    return enwik8.load_enwik8(str(path), (10, 10, 10))


@pytest.mark.parametrize(
    "make, load",
    [
        (write_npy, lambda p: strokes._load_npy(p, "test-padded-leading")),
        (write_enwik8, load_enwik8),
        (lambda d: zip_file(d / "enwik8.zip", {"enwik8": b"a" * 40}), load_enwik8),
        (write_idx_gz, mnist.read_idx),
        (lambda d: tar_gz(d / "tasks_1-20_v1-2.tar.gz", {}), lambda p: babi.load_babi([1], "en", str(p))),
    ],
    ids=["npy", "enwik8", "enwik8-zip", "mnist-gz", "babi-tar"],
)
def test_permission_denied_names_the_file(tmp_path, monkeypatch, make, load):
    path = make(tmp_path)
    deny(monkeypatch)
    with pytest.raises(DataError, match=rf"{path.name}: permission denied .*chmod u\+r"):
        load(path)


def test_permission_denied_in_a_data_directory(tmp_path, monkeypatch):
    folder = tmp_path / "tasks_1-20_v1-2" / "en"
    folder.mkdir(parents=True)
    (folder / "qa1_single-supporting-fact_train.txt").write_text("1 a.\n")
    deny(monkeypatch)
    with pytest.raises(DataError, match=r"qa1_single-supporting-fact_train.txt: permission denied"):
        babi.load_babi([1], "en", str(tmp_path / "tasks_1-20_v1-2"), splits=["train"])


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads files whatever their mode")
def test_chmod_000(tmp_path):
    path, enwik = write_npy(tmp_path), write_enwik8(tmp_path)
    for p in (path, enwik):
        p.chmod(0)
    try:
        with pytest.raises(DataError, match=r"test-padded-leading.npy: permission denied"):
            strokes._load_npy(path, "test-padded-leading")
        with pytest.raises(DataError, match=r"enwik8: permission denied"):
            load_enwik8(enwik)
    finally:
        for p in (path, enwik):
            p.chmod(0o600)
