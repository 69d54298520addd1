"""What the special-file cases (fuzz_files.py) start from and run: a tiny valid copy of each
thing mannlab reads (each data set in the layout its loader reads, a run config and recipe,
a finished tiny run) and the call that reads it (a loader, a command, ``mannlab.load``)."""

from __future__ import annotations

import gzip
import io
import json
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np


def tiny_run_config(steps: int = 1) -> str:
    """config.toml of a 4-unit LSTM on copy of lengths 1-2 (a step takes milliseconds) that
    validates and checkpoints at every step."""
    return f"""\
seed = 0

[model]
name = "lstm"
hidden_size = 4

[task]
name = "copy"
width = 2
min_length = 1
max_length = 2

[train]
steps = {steps}
batch_size = 2
val_every = 1
val_batch_size = 2
val_batches = 1
val_length_multiples = [1]
checkpoint_every = 1
progress = false
"""


CONFIG = tiny_run_config()
V1, V2 = "video_validation_0000001", "video_validation_0000002"


def write(folder: Path, files: dict[str, bytes | str]) -> None:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
    return gzip.compress(header + array.tobytes(), mtime=0)


def ptb(folder: Path) -> None:
    write(
        folder,
        {f"ptb/ptb.{s}.txt": " the cat sat \n on the <unk> mat N \n" for s in ("train", "valid", "test")},
    )


def babi(folder: Path) -> None:
    base = "tasks_1-20_v1-2/en/qa1_single-supporting-fact"
    write(
        folder,
        {
            f"{base}_train.txt": "1 Mary moved to the bathroom.\n2 Where is Mary? \tbathroom\t1\n",
            f"{base}_test.txt": "1 Daniel went back to the hallway.\n2 Where is Daniel? \thallway\t1\n",
        },
    )


def mnist(folder: Path) -> None:
    images = np.random.default_rng(0).integers(0, 256, (3, 28, 28), dtype=np.uint8)
    write(
        folder,
        {
            "mnist/train-images-idx3-ubyte.gz": idx(images),
            "mnist/train-labels-idx1-ubyte.gz": idx(np.array([3, 0, 9], np.uint8)),
        },
    )


TARGET_ROWS = "0 0 0 1 0 0 0 0 0 0 1 0 0 0\n0 0 0 1 0 0 0 0 0 0 0 1 1 0\n"


def strokes(folder: Path) -> None:
    lead = np.zeros((2, 5, 4))
    lead[0, 2:] = [[5, 7, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1]]
    lead[1, 3:] = [[9, 3, 0, 0], [0, -1, 1, 1]]
    write(
        folder,
        {
            "sequences/trainimg-0-inputdata.txt": "5 7 0 0\n1 0 0 0\n0 1 1 0\n-1 1 1 1\n",
            "sequences/trainimg-0-targetdata.txt": TARGET_ROWS,
            "strokes/train-padded-leading.npy": npy(lead),
            "strokes/train-labels.npy": npy(np.array([3, 8], np.int32)),
        },
    )


def snli(folder: Path) -> None:
    rows = [
        ("entailment", "A man plays.", "A man plays music."),
        ("contradiction", "A dog runs.", "A cat sleeps."),
    ]
    lines = [json.dumps({"gold_label": g, "sentence1": p, "sentence2": h}) for g, p, h in rows]
    write(folder, {"snli_1.0/snli_1.0_dev.jsonl": "\n".join(lines) + "\n"})


def enwik8(folder: Path) -> None:
    write(folder, {"enwik8": bytes(range(32, 127)) * 2})


def thumos(folder: Path) -> None:
    write(
        folder,
        {
            "ann/annotation/Diving_val.txt": f"{V1}  1.6 3.2\n{V2} 8.0 21.6\n",
            "ann/annotation/CliffDiving_val.txt": f"{V1} 16.0 24.0\n",
            "info.csv": f"video,fps\n{V1},30\n{V2},25\n",
            f"feats/{V1}.npy": npy(np.ones((10, 3), np.float32)),
        },
    )
    np.savez(folder / "feats.npz", **{V1: np.ones((10, 3), np.float32)})


def config(folder: Path) -> None:
    write(folder, {"config.toml": CONFIG, "recipe.toml": CONFIG})


def finished_run(folder: Path) -> None:
    """A tiny run of two steps, a checkpoint (best and last) at each."""
    import tomllib

    from mannlab.config import RunConfig
    from mannlab.training import train

    values = tomllib.loads(CONFIG)
    values["train"]["steps"] = 2
    train(RunConfig.from_dict(values).replace(run_dir=str(folder / "run")))


BUILDERS = {
    "ptb": ptb,
    "babi": babi,
    "mnist": mnist,
    "strokes": strokes,
    "snli": snli,
    "enwik8": enwik8,
    "thumos": thumos,
    "config": config,
    "run": finished_run,
}


# ------------------------------------------------------------------ what reads them


def _cli(*argv: str) -> Callable[[Path], int]:
    def act(folder: Path) -> int:
        from mannlab.cli import main

        return main(["--debug", *argv])

    return act


def _load(checkpoint: str) -> Callable[[Path], Any]:
    def act(folder: Path) -> Any:
        import mannlab

        return mannlab.load("run", checkpoint=checkpoint) and None

    return act


def _save(folder: Path) -> Any:
    """mannlab.save of the run's model into saved/."""
    import mannlab

    return mannlab.save(mannlab.load("run"), "saved") and None


def _ptb(folder: Path) -> Any:
    from mannlab.tasks import charlm

    charlm.load_corpus("ptb-char", str(folder))


def _babi(folder: Path) -> Any:
    from mannlab.data import babi

    babi.load_babi([1], "en", str(folder))


def _mnist(folder: Path) -> Any:
    from mannlab.data import mnist

    mnist.load_mnist("train", str(folder))


def _strokes_text(folder: Path) -> Any:
    from mannlab.data import strokes

    strokes.load_text("train", str(folder))


def _strokes_numpy(folder: Path) -> Any:
    from mannlab.data import strokes

    strokes.load_numpy("train", str(folder))


def _snli(folder: Path) -> Any:
    from mannlab.data import snli

    snli.load_snli(["valid"], str(folder))


def _enwik8(folder: Path) -> Any:
    from mannlab.data import enwik8

    enwik8.load_enwik8(str(folder), sizes=(150, 20, 20))


def _annotations(folder: Path) -> Any:
    from mannlab.data import thumos

    thumos.read_annotations(folder / "ann")


def _video_info(folder: Path) -> Any:
    from mannlab.data import thumos

    thumos.read_video_info(folder / "info.csv")


def _features(source: str) -> Callable[[Path], Any]:
    def act(folder: Path) -> Any:
        from mannlab.data import video_features

        video_features.read_features(folder / source, ["video_validation_0000001"])

    return act


ACTS: dict[tuple[str, str], Callable[[Path], Any]] = {
    ("ptb", "load"): _ptb,
    ("babi", "load"): _babi,
    ("mnist", "load"): _mnist,
    ("strokes", "text"): _strokes_text,
    ("strokes", "numpy"): _strokes_numpy,
    ("snli", "load"): _snli,
    ("enwik8", "load"): _enwik8,
    ("thumos", "annotations"): _annotations,
    ("thumos", "video_info"): _video_info,
    ("thumos", "features"): _features("feats"),
    ("thumos", "features_npz"): _features("feats.npz"),
    ("config", "train"): _cli("train", "--config", "config.toml", "--run-dir", "out"),
    ("config", "run"): _cli("run", "recipe.toml", "--run-dir", "out", "--no-progress"),
    ("run", "resume"): _cli("train", "--run-dir", "run", "--resume", "--steps", "3", "--no-progress"),
    ("run", "resume_csv"): _cli(
        "train", "--run-dir", "run", "--resume", "--steps", "3", "--no-progress", "--logger", "csv"
    ),
    ("run", "eval"): _cli("eval", "run", "--batches", "1", "--lengths", "2"),
    ("run", "plot"): _cli("plot", "run", "--length", "2"),
    ("run", "report"): _cli("report", "."),
    ("run", "load"): _load("best"),
    ("run", "load_last"): _load("last"),
    ("run", "save"): _save,
}
