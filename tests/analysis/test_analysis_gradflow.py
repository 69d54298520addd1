"""Gradient flow (TARDIS paper section 5): analytic linear RNNs, memory cut off, CLI smoke tests."""

import re

import numpy as np
import pytest
import torch
from torch import nn

import mannlab
from mannlab.analysis import gradflow
from mannlab.cli import main


class LinearRNN(nn.Module):
    """h_t = W h_{t-1} + U x_t, y_t = C h_t (h_0 = 0): dy_t1/dx_t0 = C W^(t1-t0) U."""

    def __init__(self, w, u, c):
        super().__init__()
        self.w, self.u, self.c = (nn.Parameter(torch.as_tensor(a, dtype=torch.float64)) for a in (w, u, c))

    def forward(self, x, state=None):
        h = x.new_zeros(x.shape[0], self.w.shape[0])
        ys = []
        for t in range(x.shape[1]):
            h = h @ self.w.T + x[:, t] @ self.u.T
            ys.append(h @ self.c.T)
        return torch.stack(ys, 1), h


def test_one_unit_linear_rnn_matches_analytic():
    model = LinearRNN([[0.9]], [[2.0]], [[0.5]])
    x = torch.randn(3, 30, 1, dtype=torch.float64)
    norms = gradflow.input_gradient_norms(model, x, max_distance=29)
    np.testing.assert_allclose(norms, np.broadcast_to(0.5 * 0.9 ** np.arange(30) * 2.0, (3, 30)), rtol=1e-12)


def test_matrix_linear_rnn_matches_analytic_frobenius_norm():
    gen = torch.Generator().manual_seed(0)
    w, u, c = (
        torch.randn(*shape, generator=gen, dtype=torch.float64) * 0.4 for shape in ((4, 4), (4, 3), (2, 4))
    )
    model = LinearRNN(w, u, c)
    x = torch.randn(2, 12, 3, dtype=torch.float64)
    norms = gradflow.input_gradient_norms(model, x, max_distance=11, chunk=3)  # chunks split samples
    expected = [torch.linalg.matrix_norm(c @ torch.linalg.matrix_power(w, d) @ u).item() for d in range(12)]
    np.testing.assert_allclose(norms, np.broadcast_to(expected, (2, 12)), rtol=1e-10)
    # loss L_t1 = 0.5 ||y_t1 - target_t1||^2: dL/dx_t0 = (y_t1 - target)^T C W^d U
    target = torch.randn(2, 12, 2, dtype=torch.float64)
    norms = gradflow.input_gradient_norms(
        model, x, 11, "loss", target, lambda y, tgt: 0.5 * (y - tgt).pow(2).sum(-1)
    )
    with torch.no_grad():
        residual = model(x)[0][:, -1] - target[:, -1]
    expected = np.stack(
        [(residual @ c @ torch.linalg.matrix_power(w, d) @ u).norm(dim=1).numpy() for d in range(12)], axis=1
    )
    np.testing.assert_allclose(norms, expected, rtol=1e-10)


class ControllerOnly(nn.Module):
    """The NTM's controller and output head alone, reads fixed at zero."""

    def __init__(self, ntm):
        super().__init__()
        self.ntm = ntm

    def forward(self, x, state=None):
        cell = self.ntm.cell
        ctrl = cell.controller
        proj = ctrl.precompute(x)
        state = ctrl.initial_state(x.shape[0])
        zeros = x.new_zeros(x.shape[0], ctrl.read_size)
        hs = []
        for t in range(x.shape[1]):
            h, h_out, state = ctrl.step(proj[:, t], zeros, state)
            hs.append(h_out)
        head = self.ntm.head
        hidden = ctrl.hidden_size
        return torch.stack(hs, 1) @ head.weight[:, :hidden].T + head.bias, state


def test_ntm_with_memory_cut_off_has_the_controllers_jacobian():
    torch.manual_seed(0)
    ntm = mannlab.NTM(4, 3, controller="lstm", controller_size=6, memory_slots=5, memory_width=3)
    with torch.no_grad():
        ntm.cell.controller.read_weight.zero_()  # reads never reach the controller
        ntm.head.weight[:, ntm.cell.controller.hidden_size :] = 0  # nor the output
    ntm = ntm.double()
    x = torch.randn(3, 15, 4, dtype=torch.float64)
    norms = gradflow.input_gradient_norms(ntm, x, 14)
    reference = gradflow.input_gradient_norms(ControllerOnly(ntm), x, 14)
    np.testing.assert_allclose(norms, reference, rtol=1e-10)
    # and the batched-copies trick equals the full Jacobian computed by autograd
    full = torch.autograd.functional.jacobian(lambda inp: ntm(inp)[0][:, -1], x[:1])  # (1, O, 1, T, I)
    direct = full[0, :, 0].pow(2).sum(dim=(0, 2)).sqrt().flip(0).numpy()
    np.testing.assert_allclose(norms[0], direct, rtol=1e-10)
    # with the memory connected the gradient differs (it also flows through the reads)
    connected = mannlab.NTM(
        4, 3, controller="lstm", controller_size=6, memory_slots=5, memory_width=3
    ).double()
    assert not np.allclose(gradflow.input_gradient_norms(connected, x, 14), reference)


def test_gradient_flow_on_a_task_and_model_registry():
    task = mannlab.tasks.make("copy", width=3)
    assert gradflow.length_for_steps(task, 21) == 10  # copy: 2 * length + 1 steps
    label, model = gradflow.load_model("lstm", task, seed=1)
    assert "untrained" in label and model.input_size == task.input_size
    flow = gradflow.gradient_flow(model, task, max_distance=20, samples=5, batch_size=2)
    assert flow.norms.shape == (5, 21) and flow.distances.tolist() == list(range(21))
    assert np.isfinite(flow.mean).all() and (flow.mean > 0).all() and flow.mean[20] < flow.mean[0]
    loss = gradflow.gradient_flow(model, task, max_distance=20, samples=2, quantity="loss")
    assert loss.norms.shape == (2, 21)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"max_distance": 30}, "need at least 31 steps"),
        ({"max_distance": -1}, "max_distance must be an integer >= 0"),
        ({"max_distance": 3, "quantity": "hidden"}, "quantity must be one of output, loss"),
        ({"max_distance": 3, "quantity": "loss"}, "needs targets and loss_fn"),
    ],
)
def test_bad_parameters_fail_clearly(kwargs, message):
    model = LinearRNN([[0.5]], [[1.0]], [[1.0]])
    with pytest.raises(ValueError, match=message):
        gradflow.input_gradient_norms(model, torch.zeros(1, 10, 1, dtype=torch.float64), **kwargs)


def test_load_model_errors_name_the_valid_models():
    task = mannlab.tasks.make("copy")
    with pytest.raises(ValueError, match="neither a run directory nor a model name; models: .*lstm"):
        gradflow.load_model("nosuchmodel", task)


def test_cli_gradflow_smoke(tmp_path, capsys):
    out = tmp_path / "g.png"
    assert (
        main(
            [
                "gradflow",
                "lstm",
                "ntm",
                "--task",
                "copy",
                "--max-distance",
                "6",
                "--samples",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "lstm (untrained, seed 0)" in text and "ntm (untrained, seed 0)" in text
    rows = (tmp_path / "g.csv").read_text().splitlines()
    assert rows[0] == "model,distance,mean,sem,median" and len(rows) == 1 + 2 * 7
    assert out.stat().st_size > 0


def test_cli_gradflow_from_a_run_directory(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--model",
                "lstm",
                "--task",
                "copy",
                "--set",
                "model.hidden_size=4",
                "--set",
                "task.max_length=3",
                "--steps",
                "2",
                "--set",
                "train.val_every=2",
                "--set",
                "train.val_batches=1",
                "--set",
                "train.val_batch_size=2",
                "--batch-size",
                "2",
                "--no-progress",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    assert (
        main(
            ["gradflow", str(run), "--max-distance", "5", "--samples", "2", "--out", str(tmp_path / "r.png")]
        )
        == 0
    )
    # the run's best checkpoint: the untrained model (step 0) unless a validation beat it
    assert re.search(r"lstm \(run, step [02]\)", capsys.readouterr().out)


def test_cli_simulate_wormhole_smoke(tmp_path, capsys):
    assert (
        main(
            [
                "simulate",
                "wormhole",
                "--steps",
                "12",
                "--cells",
                "3",
                "--simulations",
                "5",
                "--t0",
                "2",
                "--t1",
                "10",
                "--path-simulations",
                "5",
                "--memory-sizes",
                "2,4",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert "T/k - 1 = 3" in capsys.readouterr().out
    for name in ("lengths", "paths"):
        assert (tmp_path / f"wormhole-{name}.png").stat().st_size > 0
    rows = (tmp_path / "wormhole-paths.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * 2 * 2  # schemes x policies x sizes
    with pytest.raises(SystemExit) as err:
        main(["simulate", "wormhole", "--t0", "9", "--t1", "3", "--out", str(tmp_path / "x")])
    assert err.value.code == 2 and "expected t0 < t1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_model_options_after_a_colon():
    task = mannlab.tasks.make("copy")
    label, model = gradflow.load_model("ntm:memory_slots=7,controller=fnn,memory_width=3", task)
    assert label.startswith("ntm:memory_slots=7") and model.cell.slots == 7
    with pytest.raises(ValueError, match="key=value pairs"):
        gradflow.load_model("ntm:memory_slots", task)
