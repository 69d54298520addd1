"""Character-level LM: the PTB char format, download (file:// URL) with checksum and
cache, local directories and archives, streams and segments, TBPTT with carried state,
BPC, and a learning check, all on tiny generated corpora (never on shared data)."""
import math
import tarfile
import zipfile

import pytest
import torch

from mannlab.errors import ConfigError, DataError
from mannlab.state import detach_state
from mannlab.data import download
from mannlab.tasks import charlm
from mannlab.tasks.charlm import (CharLM, batchify, evaluate_bpc, load_corpus, ptb_char_tokens,
                                  ptb_words_to_chars, segments, train_segments)

WORDS = {"train": " the cat sat \n on the mat \n", "valid": " a cat \n", "test": " the mat sat \n"}


def write_ptb_words(directory):
    directory.mkdir(parents=True, exist_ok=True)
    for split, text in WORDS.items():
        (directory / f"ptb.{split}.txt").write_text(text)
    return directory


def test_ptb_words_to_chars_format():
    chars = ptb_words_to_chars(" aer banknote \n pierre <unk> N \n")
    assert chars == "a e r _ b a n k n o t e \n p i e r r e _ < u n k > _ N \n "
    assert ptb_char_tokens(chars)[:4] == ["a", "e", "r", "_"]
    assert ptb_char_tokens(chars).count("\n") == 2


def test_ptb_from_word_files_char_files_and_archives(tmp_path):
    words = write_ptb_words(tmp_path / "words")
    a = load_corpus("ptb-char", words)
    assert a.symbols == sorted(set("thecatsonmt") | {"_", "\n"})
    decoded = "".join(a.symbols[i] for i in a.train.tolist())
    assert decoded == "the_cat_sat\non_the_mat\n"
    chars = tmp_path / "chars"
    chars.mkdir()
    for split, text in WORDS.items():
        (chars / f"ptb.char.{split}.txt").write_text(ptb_words_to_chars(text))
    b = load_corpus("ptb-char", chars)
    assert b.symbols == a.symbols and torch.equal(a.test, b.test)
    archive = tmp_path / "ptb.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(words, arcname="simple-examples/data")
    c = load_corpus("ptb-char", archive)
    assert torch.equal(a.valid, c.valid)


def test_download_verifies_checksum_and_caches(tmp_path, monkeypatch):
    source = write_ptb_words(tmp_path / "remote")
    remote = {s: download.RemoteFile((source / f"ptb.{s}.txt").as_uri(),
                                     md5=download.file_hash(source / f"ptb.{s}.txt", "md5"))
              for s in charlm.SPLITS}
    monkeypatch.setitem(charlm.CORPORA, "ptb-char", remote)
    monkeypatch.setenv("MANNLAB_DATA", str(tmp_path / "cache"))
    corpus = load_corpus("ptb-char")
    assert (tmp_path / "cache" / "ptb" / "ptb.train.txt").exists()
    (source / "ptb.train.txt").unlink()                  # the cache serves the second call
    assert torch.equal(load_corpus("ptb-char").train, corpus.train)
    bad = dict(remote, test=download.RemoteFile((source / "ptb.test.txt").as_uri(), md5="0" * 32,
                                                name="other.txt"))
    monkeypatch.setitem(charlm.CORPORA, "ptb-char", bad)
    with pytest.raises(DataError, match="does not match"):
        load_corpus("ptb-char")
    assert not (tmp_path / "cache" / "ptb" / "other.txt").exists()
    gone = dict(remote, valid=download.RemoteFile((tmp_path / "nowhere.txt").as_uri(), name="v.txt"))
    monkeypatch.setitem(charlm.CORPORA, "ptb-char", gone)
    with pytest.raises(DataError, match="could not download"):
        load_corpus("ptb-char")


def test_hutter_corpus_from_zip_with_the_standard_split(tmp_path, monkeypatch):
    monkeypatch.setattr(charlm, "HUTTER_SPLIT", (20, 5, 5))
    for name in ("text8", "enwik8"):
        archive = tmp_path / f"{name}.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr(name, "abc de" * 6)
        corpus = load_corpus(name, archive)
        assert (corpus.train.numel(), corpus.valid.numel(), corpus.test.numel()) == (20, 5, 5)
        assert bytes(corpus.symbols[i] for i in corpus.train[:6].tolist()) == b"abc de"


def test_bad_sources_and_names(tmp_path):
    with pytest.raises(ConfigError, match="ptb-char"):
        load_corpus("wiki")
    with pytest.raises(DataError, match="holds neither"):
        load_corpus("ptb-char", tmp_path)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(DataError, match="neither a directory nor an archive"):
        load_corpus("ptb-char", tmp_path / "file.txt")


def test_streams_and_segments_cover_every_target_once():
    data = torch.arange(23)
    streams = batchify(data, 4)
    assert streams.shape == (4, 5) and torch.equal(streams[1], torch.arange(5, 10))
    pairs = list(segments(streams, 2))
    assert [x.shape[1] for x, _ in pairs] == [2, 2]
    for x, y in pairs:
        assert torch.equal(y, x + 1)
    targets = torch.cat([y for _, y in pairs], 1)
    assert torch.equal(targets, streams[:, 1:])
    with pytest.raises(ValueError, match="streams"):
        batchify(torch.arange(3), 2)


@pytest.mark.parametrize("model, kw", [("armin", dict(hidden_size=8, memory_slots=3)),
                                       ("tardis", dict(hidden_size=8, memory_slots=3,
                                                       address_size=2, content_size=4)),
                                       ("lstm", dict(hidden_size=8))])
def test_tbptt_state_carried_across_segments_equals_one_run(model, kw):
    torch.manual_seed(0)
    lm = CharLM(7, model, embedding_size=5, **kw).double().eval()
    tokens = torch.randint(0, 7, (2, 13))
    whole, final = lm(tokens)
    first, state = lm(tokens[:, :6])
    second, state = lm(tokens[:, 6:], detach_state(state))
    assert torch.allclose(torch.cat([first, second], 1), whole, atol=1e-12)
    bpc = evaluate_bpc(lm, tokens, 4)
    expected = torch.nn.functional.cross_entropy(whole[:, :-1].reshape(-1, 7),
                                                 tokens[:, 1:].reshape(-1)).item() / math.log(2)
    assert bpc == pytest.approx(expected, rel=1e-9)


def test_uniform_model_has_log2_vocab_bpc():
    lm = CharLM(8, "lstm", embedding_size=3, hidden_size=4)
    with torch.no_grad():
        lm.core.head.weight.zero_()
        lm.core.head.bias.zero_()
    assert evaluate_bpc(lm, torch.randint(0, 8, (1, 40)), 7) == pytest.approx(3.0)


def test_bad_tokens_give_clear_error():
    lm = CharLM(5, "lstm", embedding_size=3, hidden_size=4)
    with pytest.raises(ValueError, match="symbol indices"):
        lm(torch.rand(2, 3))


def test_learns_a_tiny_periodic_corpus_with_tbptt():
    """A period-5 sequence: predictable only from the symbols before, through the carried
    state; ARMIN's BPC falls far below the uniform log2(5)."""
    torch.manual_seed(0)
    data = torch.tensor([0, 1, 2, 1, 3, 4, 2, 0, 4, 3] * 40)
    lm = CharLM(5, "armin", embedding_size=8, hidden_size=16, memory_slots=4)
    optimizer = torch.optim.Adam(lm.parameters(), lr=1e-2)
    streams = batchify(data, 4)
    before = evaluate_bpc(lm, streams, 10)
    state, steps = None, 0
    for _ in range(6):
        _, state, taken = train_segments(lm, streams, 10, optimizer, state=None, first_step=steps)
        steps += taken
    after = evaluate_bpc(lm, streams, 10)
    assert steps == 6 * 10
    assert after < 0.5 * before, f"BPC {before:.3f} -> {after:.3f}"


def test_command_line_on_a_local_copy(tmp_path, capsys):
    words = write_ptb_words(tmp_path / "ptb")
    result = charlm.main(["--data", str(words), "--model", "lstm", "--set", "hidden_size=4",
                          "--embedding-size", "3", "--batch-size", "2", "--bptt", "4",
                          "--minutes", "0.001", "--out", str(tmp_path / "r.json")])
    assert result["steps"] >= 1 and result["test_bpc"] > 0
    assert (tmp_path / "r.json").exists()
