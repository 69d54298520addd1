"""The typed records of ARMIN's whole-sequence op (mannlab.ops.armin.armin_sequence): what goes
in, what comes out, and what its backward passes round, by name. The state and trace are the
model's own (mannlab.models.armin re-exports them). Paper symbols as in mannlab.models.armin;
C = d_h + d_r (eq. 3's rows), G = 4 d_h + d_r (eq. 6's rows).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

#: the addressing modes, in the order of the kernels' integer codes (kernels.py: SOFT = 0, ...)
MODES = ("soft", "gumbel-relaxed", "gumbel", "argmax")
#: the modes whose reads take Gumbel noise
NOISY_MODES = ("gumbel-relaxed", "gumbel")


class ARMINState(NamedTuple):
    """The recurrent state between steps and segments, as the model returns it and the op and
    every backend read it: h (B, d_h); the memory M (B, n_mem, d_r); the read counts (B, n_mem)
    and last read one-hot (B, n_mem) of TARDIS addressing (the op, auto-addressing only, passes
    them through); the steps taken since M was empty (B,) long (the write fills empty slots
    while steps < n_mem)."""

    hidden: torch.Tensor
    memory: torch.Tensor
    read_counts: torch.Tensor
    last_read: torch.Tensor
    steps: torch.Tensor


class ARMINTrace(NamedTuple):
    """Per-step internals: one step's (B, ...), stacked over time (B, T, ...); no gradient."""

    read_weights: torch.Tensor  # (B, 1, n_mem)  s_t
    write_weights: torch.Tensor  # (B, 1, n_mem)  slot written
    read_logits: torch.Tensor  # (B, 1, n_mem)  W_s [x_t, h_{t-1}] + b_s (or eq. 21)
    read_vectors: torch.Tensor  # (B, d_r)  r_t
    control_gates: torch.Tensor  # (B, d_h + d_r)  [g^h; g^r]
    gates: torch.Tensor  # (B, 4 d_h + d_r)  [i; f; g; o^h; o^r] after activation
    hidden: torch.Tensor  # (B, d_h)  h_t


class ARMINInputs(NamedTuple):
    """Per-step inputs, drawn or computed before the op runs.

    projected: (B, T, P) the input's share of eqs. 3, 6 and 9 with their biases,
        [x_c (C) | x_g (G) | x_s (n_mem) | anything after, ignored] (ARMINCell.precompute)
    noise: (T, B, n_mem) Gumbel draws of the "gumbel" and "gumbel-relaxed" reads, else None
    zoneout: (T, B, d_h) zoneout weights z of h_t = z h_{t-1} + (1 - z) ĥ_t (the 0/1 keep mask
        in training, p at evaluation), or None for no zoneout
    """

    projected: torch.Tensor
    noise: Optional[torch.Tensor] = None
    zoneout: Optional[torch.Tensor] = None


class ARMINWeights(NamedTuple):
    """The recurrent weights as stored by nn.Linear (out, in), and the three layer norms.

    control_h: [W_ig,h; W_s,h] (C + n_mem, d_h): eq. 3's and eq. 9's h_{t-1} columns
    control_r: W_ig,r (C, d_r);  gates_h: W_go,h (G, d_h);  gates_r: W_go,r (G, d_r)
    write_map: W_w (d_r, d_h), the map of h_t into memory when d_h != d_r, else None
    ln_*: gain and bias of the layer norms on eq. 3 (C), eq. 6 (G) and eq. 7 (d_h)
    """

    control_h: torch.Tensor
    control_r: torch.Tensor
    gates_h: torch.Tensor
    gates_r: torch.Tensor
    write_map: Optional[torch.Tensor]
    ln_control_weight: torch.Tensor
    ln_control_bias: torch.Tensor
    ln_gates_weight: torch.Tensor
    ln_gates_bias: torch.Tensor
    ln_hidden_weight: torch.Tensor
    ln_hidden_bias: torch.Tensor


class ARMINOptions(NamedTuple):
    """mode: one of :data:`MODES`; inverse_temperature: 1/τ of the Gumbel reads; eps: the layer
    norms' epsilon; backward: a backward follows (keep what it reads; False: inference, one
    step's scratch); trace: return the :class:`ARMINTrace` (the reference and compiled
    backends only)."""

    mode: str = "gumbel"
    inverse_temperature: float = 1.0
    eps: float = 1e-5
    backward: bool = True
    trace: bool = False


class ARMINResult(NamedTuple):
    """``features, state, trace = armin_sequence(...)``: o_t (B, T, d_h + d_r), the final
    :class:`ARMINState` and the :class:`ARMINTrace` stacked over time where ``options.trace``,
    else None."""

    features: torch.Tensor
    state: ARMINState
    trace: Optional[ARMINTrace]


class PreactivationGrads(NamedTuple):
    """What a kernel backward returns: the gradients of the pre-activations x_c (B, T, C),
    x_g (B, T, G), x_s (B, T, n_mem), of the written values v (B, T, d_r), of the layer
    norms' outputs (B, T, C | G | d_h), and of h_0 (B, d_h) and M_0 (B, n_mem, d_r)."""

    d_xc: torch.Tensor
    d_xg: torch.Tensor
    d_xs: torch.Tensor
    d_v: torch.Tensor
    d_yc: torch.Tensor
    d_yg: torch.Tensor
    d_yh: torch.Tensor
    d_h0: torch.Tensor
    d_m0: torch.Tensor


class WeightRecords(NamedTuple):
    """The forward's per-step values (B, T, .) the weight gradients are built from: h_{t-1},
    r_t, h^g, r^g, the three layer norms' normalised inputs x̂ and h_t (after zoneout)."""

    hprev: torch.Tensor
    r: torch.Tensor
    hg: torch.Tensor
    rg: torch.Tensor
    xhat_c: torch.Tensor
    xhat_g: torch.Tensor
    xhat_h: torch.Tensor
    hs: torch.Tensor


def sizes(weights: ARMINWeights) -> tuple[int, int, int]:
    """(d_h, d_r, n_mem) of the weights."""
    hidden, width = weights.gates_h.shape[1], weights.control_r.shape[1]
    return hidden, width, weights.control_h.shape[0] - weights.control_r.shape[0]


#: the largest d_h, d_r and n_mem the Triton kernels take: a block of each is padded to the
#: next power of two and its weight tiles must fit a GPU's shared memory
TRITON_MAX_SIZE = 128


def covers(options: ARMINOptions, weights: ARMINWeights, backend: str) -> bool:
    """Every backend runs the paper's configuration, which is all the op expresses (auto read,
    tied write, control gates, layer norm; zoneout or not; every addressing mode); the trace
    only the reference and the compiled step (the model's step loop returns it otherwise); the
    Triton kernels while d_h, d_r and n_mem are at most :data:`TRITON_MAX_SIZE`."""
    if options.mode not in MODES or (options.trace and backend not in ("reference", "compiled")):
        return False
    return backend != "triton" or max(sizes(weights)) <= TRITON_MAX_SIZE


#: Where the numba kernels pay: their per-row work is scalar (no vectorised exp/tanh) and their
#: BLAS (SciPy's OpenBLAS) is slower than torch's for few rows, so large batches times hidden
#: sizes run faster on the tensor path. Training (a backward follows): kernels while
#: batch * d_h <= 4096. Inference: at batch 1, else while batch * d_h <= 3200 and d_h <= 128.
#: The measurements: benchmarks/README.md, bench_armin.py.
KERNEL_MAX_TRAIN_ROWS_X_HIDDEN = 4096
KERNEL_MAX_INFER_ROWS_X_HIDDEN, KERNEL_MAX_INFER_HIDDEN = 3200, 128


def pays(options: ARMINOptions, weights: ARMINWeights, batch: int) -> bool:
    """Whether the numba kernels are expected to beat the step loop for this batch and d_h
    (see KERNEL_MAX_* above); ``options.backward``: a training pass."""
    hidden = sizes(weights)[0]
    rows_x_hidden = batch * hidden
    if options.backward:
        return rows_x_hidden <= KERNEL_MAX_TRAIN_ROWS_X_HIDDEN
    return batch == 1 or (
        rows_x_hidden <= KERNEL_MAX_INFER_ROWS_X_HIDDEN and hidden <= KERNEL_MAX_INFER_HIDDEN
    )
