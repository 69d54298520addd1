"""Tampered files where mannlab loads a model: generated cases, each run in a worker with a
time limit, and a summary table.

A case changes one thing in a valid file and then loads it, with every checksum recomputed
(so only the checks of what the files say can catch the change):

- ``saved``: a directory ``mannlab.save`` wrote (a tiny NTM), loaded with ``mannlab.load``;
- ``ckpt``: a Lightning checkpoint of a MannModule, loaded with
  ``MannModule.load_from_checkpoint``;
- ``run``: a finished tiny run, loaded with ``mannlab.load`` (``run-load``) or evaluated with
  ``mannlab eval`` (``run-eval``).

The changes (MUTATIONS): a tensor's dtype in the header (its bytes kept) or its values cast,
a NaN or an infinity in a weight, a tensor of another shape, a renamed, missing or extra
tensor, a huge safetensors header or ``__metadata__``, a config field (config.json's model,
name, arguments, run config; meta.json's step, kind, recorded config; the checkpoint's
hyperparameters) set to a value of the wrong kind, sums in upper case or not sums, a pickled
payload (also with torch.load's pre-2.6 default ``weights_only=False`` forced), config.toml
edited after training, truncated or random bytes, and a special file (a FIFO, a device, a
directory, a loop of links, a dangling link) in the place of each file.

A case passes when it ends as its mutation says: accepted (the load succeeds and the model
gives exactly the outputs of the untouched one: upper-case sums, a changed evaluation
length) or a clear error (one of mannlab's, whose message names the file for a special
file). A load that succeeds where it must not, or gives other outputs, is a silently wrong
load; a payload that runs is a failure whatever the outcome.

    python reliability/fuzz_tampered.py --cases 1000 --seed 1
    python reliability/fuzz_tampered.py --case 'saved,dtype-header,17'    # one case again

The test suite runs each (target, mutation) once (tests/reliability/test_fuzz_tampered.py).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import fuzz_files
import sweep

# mutation -> what the case must end in: "accept" (same outputs), "refuse" (a clear error) or
# "either" (one of the two)
SAVED = {
    "dtype-header": "refuse",
    "dtype-cast": "refuse",
    "nan": "refuse",
    "shape": "refuse",
    "rename": "refuse",
    "drop": "refuse",
    "extra": "refuse",
    "metadata": "refuse",
    "header-size": "refuse",
    "config-field": "refuse",
    "model-vs-run": "refuse",
    "sums-upper": "accept",
    "sums-garbage": "refuse",
    "truncated": "either",  # config.json cut after its closing brace says the same
    "random": "refuse",
    **{
        f"special-{where}-{kind}": "refuse"
        for where in ("config", "weights", "sums")
        for kind in ("fifo", "device", "directory", "loop", "dangling", "empty")
    },
}
CKPT = {
    "dtype-cast": "refuse",
    "nan": "refuse",
    "shape": "refuse",
    "rename": "refuse",
    "drop": "refuse",
    "extra": "refuse",
    "hparam-field": "refuse",
    "structure": "refuse",
    "payload": "refuse",
    "payload-old-default": "refuse",
    "truncated": "refuse",
    "random": "refuse",
    "empty": "refuse",
    **{f"special-{kind}": "refuse" for kind in ("fifo", "device", "directory", "loop", "dangling")},
}
RUN = {
    "dtype-header": "refuse",
    "dtype-cast": "refuse",
    "nan": "refuse",
    "shape": "refuse",
    # a value of the right kind (a step of 1, another seed) is a record, not the weights: the
    # model must then load the same or be refused
    "meta-field": "either",
    "config-task": "refuse",
    "config-model-arg": "refuse",
    "config-length": "accept",
    "sums-upper": "accept",
}
TARGETS: dict[str, dict[str, str]] = {"saved": SAVED, "ckpt": CKPT, "run-load": RUN, "run-eval": RUN}
SPECIAL_FILES = {"config": "config.json", "weights": "model.safetensors", "sums": "sha256.json"}
# values of the wrong kind for a config field
GARBAGE: list[Any] = [5, -1, 1.5, float("nan"), "abc", "", None, True, [], ["ntm"], {}, {"name": 5}, 10**30]


# ------------------------------------------------------------------ the cases


def cases(n: int, seed: int) -> list[str]:
    """``n`` cases: the (target, mutation) pairs in an order shuffled by ``seed``, each with a
    seed of its own (which tensor, which field, which value), round after round."""
    rng = random.Random(seed)
    pairs = [(target, mutation) for target, mutations in TARGETS.items() for mutation in mutations]
    out: list[str] = []
    while len(out) < n:
        rng.shuffle(pairs)
        out += [f"{target},{mutation},{rng.randrange(10**6)}" for target, mutation in pairs[: n - len(out)]]
    return out


def suite_cases(seed: int = 0) -> list[str]:
    """What the test suite runs: each (target, mutation) once."""
    return [f"{target},{mutation},{seed}" for target, mutations in TARGETS.items() for mutation in mutations]


def parse(case: str) -> tuple[str, str, int]:
    target, mutation, seed = case.rsplit(",", 2)
    return target, mutation, int(seed)


def judge(case: str, outcome: dict[str, Any]) -> str:
    """Why ``outcome`` is not what ``case`` must end in ("" when it is)."""
    target, mutation, _ = parse(case)
    if outcome.get("payload_ran"):
        return "the pickled payload ran"
    status = outcome["status"]
    if status == "skip":
        return ""
    if TARGETS[target][mutation] == "accept":
        if status != "ok":
            return f"refused a valid change: {_error(outcome)}"
        return "" if outcome.get("same", True) else "loaded, but the model gives other outputs"
    if status == "ok":
        same = outcome.get("same", True)
        if TARGETS[target][mutation] == "either" and same:
            return ""
        return "loaded silently" + ("" if same else ", and the model gives other outputs")
    if not outcome.get("clear"):
        return f"not one of mannlab's errors: {_error(outcome)}"
    if "\n" in outcome.get("message", "").strip():
        return f"an error of several lines: {_error(outcome)}"
    if mutation.startswith("special-"):
        name = SPECIAL_FILES.get(mutation.split("-")[1], "model.ckpt")
        if name not in outcome.get("message", ""):
            return f"the message does not name {name}: {_error(outcome)}"
    return ""


def _error(outcome: dict[str, Any]) -> str:
    if outcome["status"] == "ok":
        return "it succeeded"
    return f"{outcome.get('error', outcome['status'])}: {outcome.get('message', '')[:300]}"


# ------------------------------------------------------------------ fixtures (in the worker)

FIXTURES: dict[str, Path] = {}
REFERENCE: dict[str, Any] = {}


def setup(base: Path) -> None:
    """Build the saved model, the Lightning checkpoint and the run once; keep the outputs of
    each on a fixed input."""
    import torch

    import mannlab

    torch.set_num_threads(1)
    fuzz_files.setup(base)  # offline, no figures, and the finished run
    FIXTURES["run"] = fuzz_files.FIXTURES["run"]
    folder = base.parent / "fixtures" / "tampered"
    if not folder.exists():
        folder.mkdir(parents=True)
        torch.manual_seed(0)
        mannlab.save(
            mannlab.NTM(3, 2, controller="fnn", controller_size=4, memory_slots=3, memory_width=2),
            folder / "saved",
        )
        torch.save(_checkpoint(), folder / "model.ckpt")
    FIXTURES["tampered"] = folder
    # every fixture's model reads 3 features (copy of width 2 has a delimiter channel)
    REFERENCE["x3"] = torch.rand(2, 4, 3, generator=torch.Generator().manual_seed(1))
    REFERENCE["saved"] = _outputs(mannlab.load(folder / "saved"), REFERENCE["x3"])
    REFERENCE["run"] = _outputs(mannlab.load(FIXTURES["run"] / "run"), REFERENCE["x3"])
    REFERENCE["ckpt"] = _outputs(_load_ckpt(folder / "model.ckpt"), REFERENCE["x3"])


def _checkpoint() -> dict[str, Any]:
    import lightning as L
    import torch

    from mannlab import tasks
    from mannlab.lightning import MannModule

    torch.manual_seed(0)
    module = MannModule("lstm", tasks.make("copy", width=2, max_length=2), hidden_size=4)
    return {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "pytorch-lightning_version": L.__version__,
        "epoch": 0,
        "global_step": 1,
    }


def _load_ckpt(path: Path) -> Any:
    from mannlab.lightning import MannModule

    return MannModule.load_from_checkpoint(path)


def _outputs(model: Any, x: Any) -> Any:
    import torch

    model.eval()
    with torch.no_grad():
        return model(x)[0]


# ------------------------------------------------------------------ running a case


def run(case: str, folder: Path) -> dict[str, Any]:
    """Lay out ``case`` in ``folder`` and load it there."""
    target, mutation, seed = parse(case)
    rng = random.Random(seed)
    os.chdir(folder)
    if target == "saved":
        shutil.copytree(FIXTURES["tampered"] / "saved", folder / "saved", symlinks=True)
        tamper_saved(folder / "saved", mutation, rng)
        return _loaded(lambda: __import__("mannlab").load(folder / "saved"), "saved", "x3")
    if target == "ckpt":
        return run_ckpt(folder, mutation, rng)
    shutil.copytree(FIXTURES["run"] / "run", folder / "run", symlinks=True)
    tamper_run(folder / "run", mutation, rng)
    if target == "run-eval":
        return fuzz_files.outcome(lambda: _eval(folder))
    return _loaded(lambda: __import__("mannlab").load(folder / "run"), "run", "x3")


def _eval(folder: Path) -> int:
    from mannlab.cli import main

    return main(["--debug", "eval", str(folder / "run"), "--batches", "1", "--lengths", "2"])


def _loaded(load: Callable[[], Any], reference: str, x: str) -> dict[str, Any]:
    """The outcome of ``load()``; when it loads, whether the model gives the reference outputs."""
    import torch

    kept: dict[str, Any] = {}
    outcome = fuzz_files.outcome(lambda: kept.setdefault("model", load()) and None)
    if outcome["status"] == "ok":
        outputs = _outputs(kept["model"], REFERENCE[x])
        outcome["same"] = outputs.shape == REFERENCE[reference].shape and bool(
            torch.equal(outputs, REFERENCE[reference])
        )
    return outcome


# ------------------------------------------------------------------ safetensors files


def _header(path: Path) -> tuple[dict[str, Any], bytes]:
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def _write_header(path: Path, header: dict[str, Any], body: bytes) -> None:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + body)


def tamper_weights(path: Path, mutation: str, rng: random.Random) -> None:
    """Change the safetensors file ``path`` as ``mutation`` says."""
    import torch
    from safetensors.torch import load_file, save_file

    if mutation == "dtype-header":  # the same bytes, read as another dtype of the same size
        header, body = _header(path)
        name = rng.choice(sorted(k for k in header if k != "__metadata__"))
        header[name]["dtype"] = rng.choice(["I32", "U32"]) if header[name]["dtype"] == "F32" else "F32"
        _write_header(path, header, body)
        return
    if mutation == "metadata":
        header, body = _header(path)
        header["__metadata__"] = {"format": "pt", "note": "x" * rng.choice([70_000, 1 << 20, 20 << 20])}
        _write_header(path, header, body)
        return
    if mutation == "header-size":
        data = path.read_bytes()
        path.write_bytes(rng.choice([17 << 20, 1 << 40, 2**64 - 1]).to_bytes(8, "little") + data[8:])
        return
    weights = load_file(str(path))
    name = rng.choice(sorted(weights))
    if mutation == "dtype-cast":
        weights[name] = weights[name].to(
            rng.choice([torch.float64, torch.float16, torch.bfloat16, torch.int32])
        )
    elif mutation == "nan":
        flat = weights[name].view(-1)
        flat[rng.randrange(flat.numel())] = rng.choice([float("nan"), float("inf"), float("-inf")])
    elif mutation == "shape":
        tensor = weights[name]
        weights[name] = torch.zeros(*(tensor.shape[:-1] if tensor.dim() > 1 else ()), tensor.shape[-1] + 1)
    elif mutation == "rename":
        weights[name + ".renamed"] = weights.pop(name)
    elif mutation == "drop":
        weights.pop(name)
    elif mutation == "extra":
        weights["extra.weight"] = torch.zeros(2)
    else:
        raise ValueError(f"unknown mutation {mutation!r}")
    save_file(weights, str(path), metadata={"format": "pt"})


def _reseal_saved(directory: Path) -> None:
    from mannlab.rundir.sums import sha256

    sums = {name: sha256(directory / name) for name in ("config.json", "model.safetensors")}
    (directory / "sha256.json").write_text(json.dumps(sums))


# ------------------------------------------------------------------ a saved model


def tamper_saved(directory: Path, mutation: str, rng: random.Random) -> None:
    if mutation.startswith("special-"):
        _, where, kind = mutation.split("-")
        fuzz_files.lay(_special_kind(kind), directory / SPECIAL_FILES[where], rng, 0, False)
        return
    if mutation in ("truncated", "random"):
        name = rng.choice(["config.json", "model.safetensors"])
        path = directory / name
        data = path.read_bytes()
        path.write_bytes(
            data[: rng.randrange(len(data))] if mutation == "truncated" else rng.randbytes(len(data))
        )
    elif mutation == "config-field":
        config = json.loads((directory / "config.json").read_text())
        _set_random_field(
            config,
            rng,
            [("model",), ("model", "name"), ("model", "args"), ("run",), ("format",), ("version",)]
            + [("model", "args", key) for key in config["model"]["args"]],
        )
        (directory / "config.json").write_text(json.dumps(config))
    elif mutation == "model-vs-run":
        config = json.loads((directory / "config.json").read_text())
        other = rng.choice(
            [{"name": "lstm"}, {"name": "ntm", "memory_slots": 7}, {"name": "gru", "hidden_size": 4}]
        )
        config["run"] = {"model": other, "task": {"name": "copy", "width": 1}}
        (directory / "config.json").write_text(json.dumps(config))
    elif mutation == "sums-upper":
        sums = json.loads((directory / "sha256.json").read_text())
        (directory / "sha256.json").write_text(json.dumps({k: v.upper() for k, v in sums.items()}))
        return
    elif mutation == "sums-garbage":
        sums = json.loads((directory / "sha256.json").read_text())
        name = rng.choice(sorted(sums))
        sums[name] = rng.choice(GARBAGE[:10] + ["z" * 64, sums[name][:63]])
        (directory / "sha256.json").write_text(json.dumps(sums, allow_nan=True))
        return
    else:
        tamper_weights(directory / "model.safetensors", mutation, rng)
    _reseal_saved(directory)


def _special_kind(kind: str) -> str:
    return {"loop": "symlink_loop"}.get(kind, kind)


def _set_random_field(values: dict[str, Any], rng: random.Random, paths: list[tuple[str, ...]]) -> None:
    """Set one of ``paths`` in the nested dict ``values`` to a value of the wrong kind."""
    path = rng.choice(paths)
    here = values
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = rng.choice(GARBAGE)


# ------------------------------------------------------------------ a Lightning checkpoint


class Payload:
    """Unpickling it creates the file ``marker``: proof that pickled code ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (self.marker, "w"))


def run_ckpt(folder: Path, mutation: str, rng: random.Random) -> dict[str, Any]:
    import copy

    import torch

    path = folder / "model.ckpt"
    marker = folder / "payload-ran"
    if mutation.startswith("special-"):
        shutil.copy(FIXTURES["tampered"] / "model.ckpt", path)
        fuzz_files.lay(_special_kind(mutation.split("-")[1]), path, rng, 0, False)
    elif mutation in ("truncated", "random", "empty"):
        data = (FIXTURES["tampered"] / "model.ckpt").read_bytes()
        path.write_bytes(
            {"truncated": data[: rng.randrange(len(data))], "random": rng.randbytes(len(data)), "empty": b""}[
                mutation
            ]
        )
    else:
        checkpoint = copy.deepcopy(torch.load(FIXTURES["tampered"] / "model.ckpt", weights_only=True))
        tamper_checkpoint(checkpoint, mutation, rng, str(marker))
        torch.save(checkpoint, path)
    restore = _old_default_load() if mutation == "payload-old-default" else None
    try:
        outcome = _loaded(lambda: _load_ckpt(path), "ckpt", "x3")
    finally:
        if restore is not None:
            restore()
    outcome["payload_ran"] = marker.exists()
    return outcome


def tamper_checkpoint(checkpoint: dict[str, Any], mutation: str, rng: random.Random, marker: str) -> None:
    import torch

    state, hparams = checkpoint["state_dict"], checkpoint["hyper_parameters"]
    name = rng.choice(sorted(state))
    if mutation == "dtype-cast":
        state[name] = state[name].to(rng.choice([torch.float64, torch.float16, torch.int64]))
    elif mutation == "nan":
        state[name].view(-1)[rng.randrange(state[name].numel())] = rng.choice([float("nan"), float("inf")])
    elif mutation == "shape":
        state[name] = torch.zeros(state[name].numel() + 1)
    elif mutation == "rename":
        state[name + ".renamed"] = state.pop(name)
    elif mutation == "drop":
        state.pop(name)
    elif mutation == "extra":
        state["model.extra"] = torch.zeros(2)
    elif mutation == "hparam-field":
        _set_random_field(
            checkpoint,
            rng,
            [("hyper_parameters", key) for key in hparams]
            + [("hyper_parameters", "task_args", key) for key in hparams["task_args"]],
        )
    elif mutation == "structure":
        key = rng.choice(["state_dict", "hyper_parameters"])
        checkpoint[key] = (
            rng.choice([None, [], 5, "text", {"a": 1}]) if key == "state_dict" else rng.choice([None, [], 5])
        )
    elif mutation in ("payload", "payload-old-default"):
        checkpoint[rng.choice(["extra", "hyper_parameters"])] = Payload(marker)
    else:
        raise ValueError(f"unknown mutation {mutation!r}")


def _old_default_load() -> Callable[[], None]:
    """torch.load as before PyTorch 2.6 (``weights_only=False`` unless given); returns the
    function that restores it."""
    import torch

    real = torch.load

    def old_default(*args: Any, weights_only: Any = False, **kwargs: Any) -> Any:
        return real(*args, weights_only=weights_only, **kwargs)

    torch.load = old_default  # type: ignore[assignment]
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"

    def restore() -> None:
        torch.load = real
        os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)

    return restore


# ------------------------------------------------------------------ a run directory


def tamper_run(run: Path, mutation: str, rng: random.Random) -> None:
    if mutation.startswith("config-"):
        path = run / "config.toml"
        text = path.read_text()
        old, new = {
            "config-task": (
                'name = "copy"',
                f'name = "{rng.choice(["reverse", "repeat_copy", "copy_wide"])}"',
            ),
            "config-model-arg": ("hidden_size = 4", f"hidden_size = {rng.choice([3, 5, 8])}"),
            "config-length": ("max_length = 2", f"max_length = {rng.choice([1, 3, 5])}"),
        }[mutation]
        path.write_text(text.replace(old, new))
        return
    for kind in ("best", "last"):  # both: a damaged best alone falls back to the last
        directory = run / "checkpoints" / kind
        if mutation == "sums-upper":
            sums = json.loads((directory / "sha256.json").read_text())
            (directory / "sha256.json").write_text(json.dumps({k: v.upper() for k, v in sums.items()}))
            continue
        if mutation == "meta-field":
            meta = json.loads((directory / "meta.json").read_text())
            _set_random_field(
                meta,
                random.Random(rng.random()),
                [
                    ("step",),
                    ("kind",),
                    ("model",),
                    ("task",),
                    ("config",),
                    ("config", "model"),
                    ("config", "seed"),
                    ("config", "train"),
                ],
            )
            (directory / "meta.json").write_text(json.dumps(meta))
        else:
            tamper_weights(directory / "weights.safetensors", mutation, random.Random(rng.random()))
        from mannlab.rundir.checkpoint import seal_checkpoint

        (directory / "sha256.json").unlink()
        seal_checkpoint(directory)


if __name__ == "__main__":
    sys.exit(sweep.main("fuzz_tampered", "fuzz_tampered.py", __doc__))
