"""The typed records of ARMIN's whole-sequence op (mannlab.ops.armin.armin_sequence): what goes
in, what comes out, and what its backward passes round, by name. Paper symbols as in
mannlab.models.armin; C = d_h + d_r (eq. 3's rows), G = 4 d_h + d_r (eq. 6's rows).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

#: the addressing modes, in the order of the kernels' integer codes (kernels.py: SOFT = 0, ...)
MODES = ("soft", "gumbel-relaxed", "gumbel", "argmax")
#: the modes whose reads take Gumbel noise
NOISY_MODES = ("gumbel-relaxed", "gumbel")
#: which implementation runs the op: the numba kernels (CPU), the Triton kernels (GPU, or
#: Triton's interpreter), or the plain tensor loop of reference.py
BACKENDS = ("numba", "triton", "reference")


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


class ARMINCarry(NamedTuple):
    """What one segment hands the next: h (B, d_h), the memory M (B, n_mem, d_r) and the steps
    taken since M was empty (B,) long (the write fills empty slots while steps < n_mem)."""

    hidden: torch.Tensor
    memory: torch.Tensor
    steps: torch.Tensor


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
    norms' epsilon; keep: keep what the backward reads (False: inference, one step's scratch);
    backend: one of :data:`BACKENDS`."""

    mode: str = "gumbel"
    inverse_temperature: float = 1.0
    eps: float = 1e-5
    keep: bool = True
    backend: str = "numba"


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


#: the largest d_h, d_r and n_mem the Triton kernels take: a block of each is padded to the
#: next power of two and its weight tiles must fit a GPU's shared memory
TRITON_MAX_SIZE = 128


def triton_sizes_fit(hidden_size: int, memory_width: int, memory_slots: int) -> bool:
    """Whether the Triton kernels take these sizes (see :data:`TRITON_MAX_SIZE`)."""
    return max(hidden_size, memory_width, memory_slots) <= TRITON_MAX_SIZE
