"""Character-level LM: the PTB char format, download (file:// URL) with checksum and
cache, local directories and archives, streams and segments, TBPTT with carried state,
BPC, the LSTM baseline's layer norm / dropout / zoneout, and `mannlab train --task ptb-char`
(files, exact resume, eval, plot, run), all on tiny generated corpora (never on shared data)."""

import json
import math
import tarfile
import zipfile

import pytest
import torch

from data_files import WORDS, write_ptb_words
from mannlab.building import build_run
from mannlab.cli import main as cli_main
from mannlab.config import TrainConfig
from mannlab.data import download
from mannlab.errors import ConfigError, DataError
from mannlab.evaluation import evaluate_bpc
from mannlab.models import build_model
from mannlab.rundir import read_metrics
from mannlab.rundir.checkpoint import load_checkpoint
from mannlab.state import detach_state
from mannlab.tasks import charlm
from mannlab.tasks.charlm import (
    batchify,
    load_corpus,
    ptb_char_tokens,
    ptb_words_to_chars,
    segment_at,
    segments,
)
from mannlab.training.tbptt import tbptt_step
from mannlab.wrappers import CharLM


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
    remote = {
        s: download.RemoteFile(
            (source / f"ptb.{s}.txt").as_uri(), md5=download.file_hash(source / f"ptb.{s}.txt", "md5")
        )
        for s in charlm.SPLITS
    }
    monkeypatch.setitem(charlm.CORPORA, "ptb-char", remote)
    monkeypatch.setenv("MANNLAB_DATA", str(tmp_path / "cache"))
    with pytest.raises(download.MissingData, match="--download"):
        load_corpus("ptb-char")  # nothing is downloaded unless asked for
    corpus = load_corpus("ptb-char", download=True)
    assert (tmp_path / "cache" / "ptb" / "ptb.train.txt").exists()
    (source / "ptb.train.txt").unlink()  # the cache serves the second call
    assert torch.equal(load_corpus("ptb-char").train, corpus.train)
    bad = dict(
        remote, test=download.RemoteFile((source / "ptb.test.txt").as_uri(), md5="0" * 32, name="other.txt")
    )
    monkeypatch.setitem(charlm.CORPORA, "ptb-char", bad)
    with pytest.raises(DataError, match="does not match"):
        load_corpus("ptb-char", download=True)
    assert not (tmp_path / "cache" / "ptb" / "other.txt").exists()
    gone = dict(remote, valid=download.RemoteFile((tmp_path / "nowhere.txt").as_uri(), name="v.txt"))
    monkeypatch.setitem(charlm.CORPORA, "ptb-char", gone)
    with pytest.raises(DataError, match="could not download"):
        load_corpus("ptb-char", download=True)


def test_hutter_corpus_from_zip_with_the_standard_split(tmp_path, monkeypatch):
    monkeypatch.setattr(charlm, "HUTTER_SPLIT", (20, 5, 5))
    for name in ("text8", "enwik8"):
        archive = tmp_path / f"{name}.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr(name, "abc de" * 6)
        corpus = load_corpus(name, archive)
        assert (corpus.train.numel(), corpus.valid.numel(), corpus.test.numel()) == (20, 5, 5)
        assert bytes(corpus.symbols[i] for i in corpus.train[:6].tolist()) == b"abc de"


def test_data_dir_with_an_archive_inside_and_download_into_it(tmp_path, monkeypatch):
    """--data-dir DIR: DIR may hold an archive of the files (as the published PTB download is);
    a DIR with no PTB files receives the download in DIR/ptb/."""
    words = write_ptb_words(tmp_path / "words")
    data = tmp_path / "data"
    data.mkdir()
    with tarfile.open(data / "ptb.tar.gz", "w:gz") as tf:
        tf.add(words, arcname=".")
    assert torch.equal(load_corpus("ptb-char", data).train, load_corpus("ptb-char", words).train)
    remote = {s: download.RemoteFile((words / f"ptb.{s}.txt").as_uri()) for s in charlm.SPLITS}
    monkeypatch.setitem(charlm.CORPORA, "ptb-char", remote)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert torch.equal(
        load_corpus("ptb-char", empty, download=True).valid, load_corpus("ptb-char", words).valid
    )
    assert (empty / "ptb" / "ptb.valid.txt").is_file()


def test_bad_sources_and_names(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="ptb-char"):
        load_corpus("wiki")
    gone = {s: download.RemoteFile((tmp_path / f"nowhere.{s}.txt").as_uri()) for s in charlm.SPLITS}
    monkeypatch.setitem(charlm.CORPORA, "ptb-char", gone)
    with pytest.raises(DataError, match="could not download"):
        load_corpus("ptb-char", tmp_path, download=True)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(DataError, match="neither a directory nor an archive"):
        load_corpus("ptb-char", tmp_path / "file.txt")
    archive = tmp_path / "other.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tmp_path / "file.txt", arcname="file.txt")
    with pytest.raises(DataError, match="holds neither"):
        load_corpus("ptb-char", archive)


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
    assert all(torch.equal(segment_at(streams, i, 2)[0], x) for i, (x, _) in enumerate(pairs))
    assert [x.shape[1] for x, _ in segments(streams, 3)] == [3, 1]
    with pytest.raises(ValueError, match="streams"):
        batchify(torch.arange(3), 2)


@pytest.mark.parametrize(
    "model, kw",
    [
        ("armin", dict(hidden_size=8, memory_slots=3)),
        ("tardis", dict(hidden_size=8, memory_slots=3, address_size=2, content_size=4)),
        ("lstm", dict(hidden_size=8)),
    ],
)
def test_tbptt_state_carried_across_segments_equals_one_run(model, kw):
    torch.manual_seed(0)
    lm = CharLM(7, model, embedding_size=5, **kw).double().eval()
    tokens = torch.randint(0, 7, (2, 13))
    whole, final = lm(tokens)
    first, state = lm(tokens[:, :6])
    second, state = lm(tokens[:, 6:], detach_state(state))
    assert torch.allclose(torch.cat([first, second], 1), whole, atol=1e-12)
    bpc = evaluate_bpc(lm, tokens, 4)
    expected = torch.nn.functional.cross_entropy(
        whole[:, :-1].reshape(-1, 7), tokens[:, 1:].reshape(-1)
    ).item() / math.log(2)
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
    """A period-10 sequence: predictable only from the symbols before, through the carried
    state; ARMIN's BPC falls far below the uniform log2(5)."""
    torch.manual_seed(0)
    data = torch.tensor([0, 1, 2, 1, 3, 4, 2, 0, 4, 3] * 40)
    lm = CharLM(5, "armin", embedding_size=8, hidden_size=16, memory_slots=4)
    optimizer = torch.optim.Adam(lm.parameters(), lr=1e-2)
    streams = batchify(data, 4)
    before = evaluate_bpc(lm, streams, 10)
    lm.train()
    for _ in range(6):
        state = None
        for x, y in segments(streams, 10):
            _, state = tbptt_step(lm, x, y, state, optimizer, clip=1.0)
            assert not state.hidden.requires_grad  # carried detached
    after = evaluate_bpc(lm, streams, 10)
    assert after < 0.5 * before, f"BPC {before:.3f} -> {after:.3f}"


def test_tbptt_step_with_tardis_reinforce_uses_its_auxiliary_loss():
    """TARDIS with REINFORCE: the step passes the trace, the detached NLL and the scorer."""
    torch.manual_seed(0)
    lm = CharLM(
        5,
        "tardis",
        embedding_size=4,
        hidden_size=8,
        memory_slots=3,
        address_size=2,
        content_size=4,
        addressing="reinforce",
    )
    assert lm.uses_aux_loss
    optimizer = torch.optim.Adam(lm.parameters(), lr=1e-3)
    tokens = torch.randint(0, 5, (2, 9))
    loss, state = tbptt_step(lm, tokens[:, :4], tokens[:, 1:5], None, optimizer, clip=1.0)
    loss, state = tbptt_step(lm, tokens[:, 4:8], tokens[:, 5:9], state, optimizer, clip=1.0)
    assert math.isfinite(loss) and lm.core.aux_read.weight.grad is not None


# ----------------------------------------------------- the LSTM baseline


def test_lstm_cell_loop_equals_nn_lstm_with_options_off():
    torch.manual_seed(0)
    fused = build_model("lstm", 3, 4, hidden_size=5, num_layers=2).double()
    loop = build_model("lstm", 3, 4, hidden_size=5, num_layers=2, fused=False).double()
    loop.load_state_dict(fused.state_dict())  # the same parameters by name
    assert fused.fused and not loop.fused
    x = torch.randn(2, 7, 3, dtype=torch.float64, requires_grad=True)
    (y1, s1), (y2, s2) = fused(x), loop(x)
    assert torch.allclose(y1, y2, atol=1e-12)
    assert torch.allclose(s1.hidden, s2.hidden, atol=1e-12) and torch.allclose(s1.cell, s2.cell, atol=1e-12)
    g1 = torch.autograd.grad(y1.square().sum(), [x, *fused.parameters()])
    g2 = torch.autograd.grad(y2.square().sum(), [x, *loop.parameters()])
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(g1, g2))


def test_lstm_options_pick_the_cell_loop_and_are_checked():
    assert not build_model("lstm", 3, 2, layer_norm=True).fused
    assert not build_model("lstm", 3, 2, zoneout=0.1).fused
    assert build_model("lstm", 3, 2, dropout=0.5).fused  # output dropout runs fused too
    with pytest.raises(ConfigError, match="fused=true"):
        build_model("lstm", 3, 2, zoneout=0.1, fused=True)
    with pytest.raises(ConfigError, match="zoneout"):
        build_model("lstm", 3, 2, zoneout=1.5)


def _one_step_by_hand(model, x, h, c):
    """Hand-worked LN-LSTM step (gate order i, f, g, o; LN with gain 1, bias 0)."""
    lstm = model.lstm
    a = x @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + h @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
    a = (a - a.mean(-1, keepdim=True)) / torch.sqrt(a.var(-1, unbiased=False, keepdim=True) + 1e-5)
    i, f, g, o = a.chunk(4, -1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    n = (c_new - c_new.mean(-1, keepdim=True)) / torch.sqrt(
        c_new.var(-1, unbiased=False, keepdim=True) + 1e-5
    )
    return torch.sigmoid(o) * torch.tanh(n), c_new


def test_lstm_layer_norm_step_by_hand_and_a_hand_worked_value():
    torch.manual_seed(0)
    model = build_model("lstm", 2, None, hidden_size=3, layer_norm=True).double().eval()
    x = torch.randn(1, 1, 2, dtype=torch.float64)
    h0, c0 = torch.randn(1, 3, dtype=torch.float64), torch.randn(1, 3, dtype=torch.float64)
    from mannlab.models.lstm import LSTMState

    y, state = model(x, LSTMState(h0[None], c0[None]))
    h, c = _one_step_by_hand(model, x[:, 0], h0, c0)
    assert torch.allclose(y[:, 0], h, atol=1e-12) and torch.allclose(state.cell[0], c, atol=1e-12)
    # a value worked out on paper: all weights 0, biases put a = (i, f, g, o) = (0, 0, 0, 0) in
    # every unit, c_{t-1} = 1: c_t = 0.5 * 1 + 0.5 * tanh(0) = 0.5 and, without layer norm,
    # h_t = 0.5 * tanh(0.5) = 0.23106
    plain = build_model("lstm", 1, None, hidden_size=2, fused=False).double()
    with torch.no_grad():
        for p in plain.parameters():
            p.zero_()
    y, state = plain(
        torch.zeros(1, 1, 1, dtype=torch.float64),
        LSTMState(torch.zeros(1, 1, 2, dtype=torch.float64), torch.ones(1, 1, 2, dtype=torch.float64)),
    )
    assert state.cell.flatten().tolist() == pytest.approx([0.5, 0.5])
    assert y.flatten().tolist() == pytest.approx([0.5 * math.tanh(0.5)] * 2, abs=1e-12)


def test_lstm_zoneout_uses_its_expectation_at_eval_and_samples_in_training():
    torch.manual_seed(0)
    p = 0.3
    model = build_model("lstm", 2, None, hidden_size=4, zoneout=p).double()
    plain = build_model("lstm", 2, None, hidden_size=4, fused=False).double()
    plain.load_state_dict(model.state_dict())
    from mannlab.models.lstm import LSTMState

    x = torch.randn(1, 1, 2, dtype=torch.float64)
    state = LSTMState(torch.randn(1, 1, 4, dtype=torch.float64), torch.randn(1, 1, 4, dtype=torch.float64))
    _, new = plain(x, state)  # h'_t, c'_t without zoneout
    model.eval()
    y, s = model(x, state)
    assert torch.allclose(s.hidden, p * state.hidden + (1 - p) * new.hidden, atol=1e-12)
    assert torch.allclose(s.cell, p * state.cell + (1 - p) * new.cell, atol=1e-12)
    model.train()
    batch = 4000
    many = LSTMState(state.hidden.expand(1, batch, 4), state.cell.expand(1, batch, 4))
    _, s = model(x.expand(batch, 1, 2), many)
    kept = torch.isclose(s.hidden, state.hidden.expand(1, batch, 4)) & ~torch.isclose(
        s.hidden, new.hidden.expand(1, batch, 4)
    )
    assert kept.double().mean().item() == pytest.approx(p, abs=0.02)
    assert s.hidden.mean(1).sub(p * state.hidden + (1 - p) * new.hidden).abs().max() < 0.03


def test_lstm_dropouts_are_off_at_eval():
    torch.manual_seed(0)
    model = build_model("lstm", 3, 5, hidden_size=6, dropout=0.5, recurrent_dropout=0.5).double()
    plain = build_model("lstm", 3, 5, hidden_size=6, fused=False).double()
    plain.load_state_dict(model.state_dict())
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    model.eval()
    assert torch.allclose(model(x)[0], plain(x)[0], atol=1e-12)
    model.train()
    assert not torch.allclose(model(x)[0], plain(x)[0])
    lm = CharLM(7, "lstm", embedding_size=4, input_dropout=0.5, output_dropout=0.5, hidden_size=6).eval()
    bare = CharLM(7, "lstm", embedding_size=4, hidden_size=6)
    bare.load_state_dict(lm.state_dict())
    tokens = torch.randint(0, 7, (2, 5))
    assert torch.equal(lm(tokens)[0], bare(tokens)[0])
    lm.train()
    assert not torch.equal(lm(tokens)[0], bare(tokens)[0])


@pytest.mark.parametrize(
    "kw", [dict(layer_norm=True, zoneout=0.3, recurrent_dropout=0.2), dict(layer_norm=True, num_layers=2)]
)
def test_lstm_chunked_tbptt_with_carried_state_equals_one_run(kw):
    """In training mode too: the same seed draws the same zoneout and recurrent-dropout masks
    step by step (output dropout draws per call, so chunks draw in another order)."""
    torch.manual_seed(0)
    lm = CharLM(7, "lstm", embedding_size=5, hidden_size=8, **kw).double()
    tokens = torch.randint(0, 7, (3, 12))
    for mode in (lm.eval, lm.train):
        mode()
        torch.manual_seed(1)
        whole, final = lm(tokens)
        torch.manual_seed(1)
        first, state = lm(tokens[:, :5])
        second, state = lm(tokens[:, 5:], detach_state(state))
        assert torch.allclose(torch.cat([first, second], 1), whole, atol=1e-12)
        assert torch.allclose(state.cell, final.cell, atol=1e-12)


# ------------------------------------------------ mannlab train --task ptb-char

TINY = [
    "--task",
    "ptb-char",
    "--set",
    "model.embedding_size=4",
    "--set",
    "model.hidden_size=6",
    "--set",
    "task.bptt=5",
    "--batch-size",
    "2",
    "--set",
    "train.val_every=3",
    "--set",
    "train.checkpoint_every=3",
    "--set",
    "task.valid_batch_size=2",
    "--no-progress",
]


@pytest.fixture
def ptb(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield write_ptb_words(tmp_path / "ptb")
    torch.set_num_threads(threads)


def test_train_writes_a_run_with_bpc_metrics_figure_and_test(ptb, capsys):
    assert (
        cli_main(
            [
                "train",
                "--model",
                "lstm",
                *TINY,
                "--data-dir",
                str(ptb),
                "--steps",
                "7",
                "--set",
                "model.layer_norm=true",
                "--set",
                "model.zoneout=0.2",
                "--run-dir",
                "run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "test BPC" in out and "best valid BPC" in out
    rows = read_metrics("run/metrics.jsonl")
    assert {r["split"] for r in rows} == {"train", "val", "test"}
    assert all("bpc" in r for r in rows)
    assert [r["step"] for r in rows if r["split"] == "val"] == [3, 6, 7]
    summary = json.loads(open("run/summary.json").read())
    assert summary["steps"] == 7 and summary["test"]["batch_size"] == 1
    assert summary["cpu_seconds"] > 0
    assert summary["segments_per_epoch"] == 2  # 2 streams of 11 symbols: 10 targets, bptt 5
    assert open("run/figures/learning_curve.png", "rb").read(4) == b"\x89PNG"
    meta, state = load_checkpoint("run/checkpoints/last")
    assert meta["step"] == 7 and isinstance(state["carried"], list)
    assert cli_main(["eval", "run"]) == 0 and "test:" in capsys.readouterr().out
    assert cli_main(["plot", "run", "--out", "figs"]) == 0
    assert (ptb.parent / "figs" / "learning_curve.png").is_file()


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_time_budget_stops_training_on_the_chosen_clock(ptb, clock):
    """A budget of 0.6 ms ends training long before the step budget, whichever clock counts."""
    assert (
        cli_main(
            [
                "train",
                "--model",
                "lstm",
                *TINY,
                "--data-dir",
                str(ptb),
                "--steps",
                "50",
                "--set",
                "train.max_minutes=0.00001",
                "--set",
                f"train.budget_clock={clock}",
                "--run-dir",
                "run",
            ]
        )
        == 0
    )
    summary = json.loads(open("run/summary.json").read())
    assert summary["stopped_by"] == "time" and summary["budget_clock"] == clock
    assert summary["steps"] < 50


def test_budget_clock_is_checked():
    with pytest.raises(ConfigError, match="budget_clock"):
        TrainConfig.from_dict({"budget_clock": "gpu"})


@pytest.mark.parametrize(
    "model, extra",
    [
        (
            "lstm",
            [
                "--set",
                "model.zoneout=0.3",
                "--set",
                "model.layer_norm=true",
                "--set",
                "model.input_dropout=0.1",
            ],
        ),
        (
            "armin",
            [
                "--set",
                "model.memory_slots=3",
                "--set",
                "model.temperature_every=2",
                "--set",
                "model.zoneout=0.2",
            ],
        ),
    ],
)
def test_resume_continues_exactly(ptb, model, extra):
    """Interrupted at step 4 (mid-epoch: state carried) and resumed == one run of 8 steps:
    stream position, carried state, optimizer, RNG and temperature schedule all restored."""
    common = ["train", "--model", model, *TINY, *extra, "--data-dir", str(ptb)]
    assert cli_main(common + ["--steps", "8", "--run-dir", "whole"]) == 0
    assert cli_main(common + ["--steps", "4", "--run-dir", "parts"]) == 0
    assert cli_main(["train", "--run-dir", "parts", "--resume", "--steps", "8", "--no-progress"]) == 0
    whole = load_checkpoint("whole/checkpoints/last")
    parts = load_checkpoint("parts/checkpoints/last")
    from safetensors.torch import load_file

    w1, w2 = (
        load_file("whole/checkpoints/last/weights.safetensors"),
        load_file("parts/checkpoints/last/weights.safetensors"),
    )
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert all(torch.equal(a, b) for a, b in zip(whole[1]["carried"], parts[1]["carried"]))

    def train(d):
        return [(r["step"], r["bpc"]) for r in read_metrics(f"{d}/metrics.jsonl") if r["split"] == "train"]

    assert train("whole") == train("parts")


def test_unknown_keys_and_misplaced_options_are_rejected(ptb, capsys):
    for bad, words in (
        (["--set", "task.bogus=1"], ["bogus", "bptt", "valid_symbols"]),
        (["--set", "model.bogus=1"], ["bogus", "hidden_size", "embedding_size"]),
        (["--set", "task.bptt=0"], ["task.bptt"]),
    ):
        with pytest.raises(SystemExit) as info:
            cli_main(["train", "--model", "lstm", *TINY, "--data-dir", str(ptb), *bad])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert all(w in err for w in words), err


def test_train_downloads_from_the_canonical_address(ptb, tmp_path, monkeypatch):
    remote = {
        s: download.RemoteFile(
            (ptb / f"ptb.{s}.txt").as_uri(), md5=download.file_hash(ptb / f"ptb.{s}.txt", "md5")
        )
        for s in charlm.SPLITS
    }
    monkeypatch.setitem(charlm.CORPORA, "ptb-char", remote)
    monkeypatch.setenv("MANNLAB_DATA", str(tmp_path / "cache"))
    assert cli_main(["train", "--model", "lstm", *TINY, "--steps", "2", "--download"]) == 0
    assert (tmp_path / "cache" / "ptb" / "ptb.test.txt").is_file()


def test_run_a_recipe_over_seeds(ptb, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(f"""seeds = [0, 1]
run_dir = "seeds"
[model]
name = "lstm"
embedding_size = 3
hidden_size = 4
[task]
name = "ptb-char"
data_dir = "{ptb}"
bptt = 5
valid_batch_size = 2
[train]
optimizer = "adam"
batch_size = 2
steps = 2
progress = false
""")
    assert cli_main(["run", str(recipe)]) == 0
    table = (tmp_path / "seeds" / "summary.md").read_text()
    assert "test BPC" in table and "| 1 |" in table


@pytest.mark.parametrize("name", ["armin", "lstm", "tardis"])
def test_recipes_build_with_about_equal_parameter_counts(name, ptb):
    from pathlib import Path

    from mannlab.config import load_config

    recipe = Path(__file__).resolve().parents[2] / "recipes" / f"ptb-char-{name}.toml"
    config = load_config(recipe, [f"task.data_dir={json.dumps(str(ptb))}", "task.valid_batch_size=2"])
    task, model = build_run(config)
    assert task.params["bptt"] == 150 and config.train.max_minutes == 30
    # with PTB's 50 symbols (the tiny corpus has fewer): within 1% of ARMIN's 313,562
    full = CharLM(50, config.model, **config.model_args)
    assert abs(sum(p.numel() for p in full.parameters()) - 313562) < 3200
