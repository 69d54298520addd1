"""mannlab.lightning with a real lightning.Trainer for a few CPU steps: copy with an LSTM, a
D-NTM whose REINFORCE aux loss and curriculum must run each step, and char-LM TBPTT with the
state carried, detached, across segments. Lightning is optional: these skip without it."""

import importlib.util
import subprocess
import sys

import pytest
import torch

from data_files import write_ptb_words
from mannlab import tasks
from mannlab.ops import use_kernels
from mannlab.state import map_state

needs_lightning = pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None,
    reason="lightning is not installed: pip install 'mannlab[lightning]'",
)


def fit(tmp_path, module, data, **kwargs):
    import lightning as L

    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        **kwargs,
    )
    with use_kernels(False):  # the tensor path: no kernel compilation in a few-step test
        trainer.fit(module, data)
    return trainer


def test_import_mannlab_does_not_import_lightning():
    code = "import sys, mannlab, mannlab.tasks.torch_data; print('lightning' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )


@needs_lightning
def test_copy_with_an_lstm(tmp_path):
    from mannlab.lightning import MannModule, TaskDataModule

    torch.manual_seed(0)
    task = tasks.make("copy", width=4, max_length=3)
    module = MannModule("lstm", task, lr=1e-3, hidden_size=16)
    data = TaskDataModule(task, batch_size=4, seed=0, val_batch_size=8, val_batches=2)
    trainer = fit(tmp_path, module, data, max_steps=6, val_check_interval=3)
    assert trainer.global_step == 6
    metrics = trainer.callback_metrics
    assert {"train/loss", "train/bce", "val/bce", "val/bit_error_rate"} <= set(metrics)
    assert all(torch.isfinite(v) for v in metrics.values())


@needs_lightning
def test_aux_loss_and_curriculum_each_step(tmp_path, monkeypatch):
    import mannlab.lightning as ml
    from mannlab.training.schedules import start_minibatch

    torch.manual_seed(0)
    task = tasks.make("copy", width=4, max_length=3)
    module = ml.MannModule(
        "dntm",
        task,
        lr=1e-3,
        controller_size=8,
        memory_slots=5,
        address_size=2,
        content_size=3,
        addressing="reinforce",
        curriculum_p0=1.0,
    )
    steps, aux = [], []
    monkeypatch.setattr(
        ml, "start_minibatch", lambda model, step: (steps.append(step), start_minibatch(model, step))
    )
    model = module.model
    original = model.aux_loss
    monkeypatch.setattr(
        model, "aux_loss", lambda *a, **k: aux.append((model.soft_minibatch, k)) or original(*a, **k)
    )
    fit(
        tmp_path,
        module,
        ml.TaskDataModule(task, batch_size=4, val_batches=1),
        max_steps=4,
        val_check_interval=2,
    )
    assert steps == [0, 1, 2, 3]
    assert len(aux) == 4 and all(k["outputs_per_step"] == task.outputs_per_step for _, k in aux)
    assert aux[0][0] is True  # p_0 = p0 = 1: the curriculum's first draw is a soft minibatch


@needs_lightning
def test_charlm_tbptt_carries_the_detached_state(tmp_path, monkeypatch):
    import mannlab.lightning as ml
    from mannlab.training.tbptt import segment_loss

    torch.manual_seed(0)
    task = tasks.make(
        "ptb-char",
        data_dir=str(write_ptb_words(tmp_path / "ptb")),
        bptt=4,
        valid_batch_size=1,
        test_batch_size=1,
    )
    carried = []

    def spy(model, x, y, state):
        grads = []
        map_state(lambda t: grads.append(t.requires_grad) or t, state)
        carried.append(any(grads) if state is not None else None)
        return segment_loss(model, x, y, state)

    monkeypatch.setattr(ml, "segment_loss", spy)
    module = ml.MannModule("lstm", task, lr=1e-3, hidden_size=8, embedding_size=4)
    trainer = fit(tmp_path, module, ml.TaskDataModule(task, batch_size=2), max_steps=5)
    # 3 segments per pass: each pass starts from the initial state, then carries it detached
    assert carried == [None, False, False, None, False]
    assert torch.isfinite(trainer.callback_metrics["val/bpc"])


@needs_lightning
def test_a_checkpoint_reloads_with_load_from_checkpoint_and_fit_warns_nothing(tmp_path, recwarn):
    import lightning as L

    from mannlab.lightning import MannModule, TaskDataModule

    torch.manual_seed(0)
    task = tasks.make("copy", width=4, max_length=3)
    module = MannModule("ntm", task, lr=1e-3, controller_size=8, memory_slots=5, memory_width=3)
    trainer = L.Trainer(
        accelerator="cpu",
        logger=L.pytorch.loggers.CSVLogger(tmp_path),
        max_steps=2,
        val_check_interval=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    with use_kernels(False):
        trainer.fit(module, TaskDataModule(task, batch_size=4, val_batches=1))
    assert not [w for w in recwarn if "__len__" in str(w.message)], [str(w.message) for w in recwarn]
    (checkpoint,) = tmp_path.rglob("*.ckpt")
    (hparams,) = tmp_path.rglob("hparams.yaml")
    assert "memory_slots: 5" in hparams.read_text()
    loaded = MannModule.load_from_checkpoint(checkpoint)
    assert loaded.task.params == task.params and loaded.hparams["model"] == "ntm"
    x = task.sample(2, 9)[0]
    module.eval(), loaded.eval()
    with torch.no_grad(), use_kernels(False):
        assert torch.equal(loaded(x)[0], module(x)[0])


@needs_lightning
def test_a_module_given_as_a_model_reloads_too(tmp_path):
    import mannlab
    from mannlab.lightning import MannModule

    task = tasks.make("copy", width=4, max_length=3)
    module = MannModule(mannlab.GRU(task.input_size, task.output_size, hidden_size=6), task)
    assert module.hparams["model"]["model"] == {
        "name": "gru",
        "args": {"input_size": task.input_size, "output_size": 4, "hidden_size": 6},
    }
    rebuilt = MannModule(**module.hparams)
    rebuilt.load_state_dict(module.state_dict())
    foreign = MannModule(torch.nn.GRU(task.input_size, 4, batch_first=True), task)
    assert foreign.hparams["model"] is None
    with pytest.raises(TypeError, match="model=module"):
        MannModule(**foreign.hparams)
    # a model behind a task adapter saves through its run config
    module = MannModule("lstm", task, hidden_size=6)
    mannlab.save(module.model, tmp_path / "saved")
    assert mannlab.load(tmp_path / "saved").config.task_args == task.params
