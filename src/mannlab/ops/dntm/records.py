"""The typed records of the D-NTM's whole-sequence op (mannlab.ops.dntm.dntm_sequence): what goes
in, what comes out, by name. Paper symbols as in mannlab.models.dntm: d_h the controller's
size, N' cells (N + 1 with the NOP cell), A (N' x d_a) the address part, C (N' x d_c) the
content part, W = d_a + d_c, R read and H write heads, K = R + H, J addressing steps, K_w the
width of a write key (W with write keys over [A; C], d_c over C alone), P_c the controller's
pre-activation width (3 d_h for the GRU, d_h for the feed-forward controller).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

#: the addressing modes, in the order of the kernels' integer codes (kernels.py: SOFT = 0, ...):
#: soft weightings; one-hot samples (REINFORCE's, section 4); one-hot argmax; one-hot samples
#: with the gradient of the relaxed sample (straight-through Gumbel-softmax)
MODES = ("soft", "sample", "argmax", "gumbel")
#: the modes that take Exp(1) draws
NOISY_MODES = ("sample", "gumbel")
#: what the write heads' keys are compared with: the content part C, or the memory [A; C] (eq. 10)
WRITE_KEYS = ("content", "memory")
#: how a write head picks its cells: by its learned weighting (eqs. 8-13), or sequentially (one
#: write head: cell n for the n-th write while cells remain, then the cell read least so far)
WRITES = ("learned", "sequential")
#: which implementation runs the op: the numba kernels (CPU), the Triton kernels (GPU; on CPU
#: tensors in Triton's interpreter) or the plain tensor loop of reference.py
BACKENDS = ("numba", "triton", "reference")
#: ε of the similarity S(x, y) = x . y / (|x| |y| + ε) (eqs. 10-11)
SIMILARITY_EPS = 1e-6
#: the LRU moving average, v_t = LRU_DECAY v_{t-1} + (1 - LRU_DECAY) z_t (section 3.3)
LRU_DECAY = 0.1


def head_sizes(read_heads: int, write_heads: int, width: int, write_key_size: int, content_size: int) -> list:
    """The blocks of the head layer's output W_p h_t + b_p, grouped by activation:
    [k^r (R W) | k^w (H K_w) | β (R + H) | γ (R + H) | e (H d_c) | α_h (H) | W_m h + b_m (H d_c)]."""
    R, H = read_heads, write_heads
    return [R * width, H * write_key_size, R + H, R + H, H * content_size, H, H * content_size]


class DNTMInputs(NamedTuple):
    """Per-step inputs, computed or drawn before the op runs.

    projected: (B, T, P_c + H (d_c + 1)) the input's share of every step,
        [W x_t + b (P_c, the controller's) | W_x x_t (H d_c, eq. 4) | v_α^T x_t (H, eq. 3)]
        (DNTMCell.precompute)
    draws: (T J, B K' N') Exp(1) draws E of the modes "sample" and "gumbel", else None; per
        time and addressing step the read heads' (B, R, N') then, with learned writes, the
        write heads' (B, H, N') (K' = R + H; K' = R with sequential writes). A sample is the
        cell argmax_i w_i / E_i, the one torch.multinomial(w, 1) draws from the same E.
    """

    projected: torch.Tensor
    draws: Optional[torch.Tensor] = None


class DNTMCarry(NamedTuple):
    """What one segment hands the next: the GRU's h (B, d_h) (None for the feed-forward
    controller), the content part C (B, N', d_c), the read vectors φ (B, R, W), the LRU
    averages v of the read (B, R, N') and write (B, H, N') heads and, with sequential writes
    (else None), the writes made so far (B,) and the reads of each cell so far (B, N')."""

    hidden: Optional[torch.Tensor]
    content: torch.Tensor
    read_vectors: torch.Tensor
    read_lru: torch.Tensor
    write_lru: torch.Tensor
    written: Optional[torch.Tensor] = None
    reads: Optional[torch.Tensor] = None


class DNTMWeights(NamedTuple):
    """The weights the time loop multiplies by, as nn.Linear stores them (out, in); the input
    projections are in DNTMInputs.projected.

    read_weight: W_r (P_c, R W), the controller's weight on φ_{t-1}
    recurrent_weight, recurrent_bias: the GRU's W_h (3 d_h, d_h) and b_h (3 d_h), gates in the
        order (r, u, n) as torch.nn.GRUCell; None for the feed-forward (tanh) controller
    head_weight, head_bias: the head layer W_p (P, d_h), b_p (P), its blocks as :func:`head_sizes`
    address: A (N', d_a)
    """

    read_weight: torch.Tensor
    recurrent_weight: Optional[torch.Tensor]
    recurrent_bias: Optional[torch.Tensor]
    head_weight: torch.Tensor
    head_bias: torch.Tensor
    address: torch.Tensor


class DNTMOptions(NamedTuple):
    """mode: one of :data:`MODES`; addressing_steps J; lru: LRU addressing (eqs. 12-13);
    nop: the last cell is the NOP cell (reads return nothing there, writes are dropped);
    write_keys: one of :data:`WRITE_KEYS`; writes: one of :data:`WRITES`; inverse_temperature:
    1/τ of mode "gumbel"; keep: keep what the backward reads (False: inference, one step's
    scratch); trace: return the per-step weightings, head activations and memory
    (:class:`DNTMSteps`); similarity_eps, lru_decay: the constants of eqs. 10-11 and 13."""

    mode: str = "soft"
    addressing_steps: int = 1
    lru: bool = True
    nop: bool = False
    write_keys: str = "memory"
    writes: str = "learned"
    inverse_temperature: float = 1.0
    keep: bool = True
    trace: bool = True
    similarity_eps: float = SIMILARITY_EPS
    lru_decay: float = LRU_DECAY


class DNTMSteps(NamedTuple):
    """Per-step values (B, T, ...). Always: the features [h_t; φ_t] (d_h + R W) of the last
    addressing step and, as views of them, h_t (d_h) and φ_t (R, W). With ``options.trace``
    (else None), per addressing step (the head axis holds J * heads entries, addressing step
    major): the weightings used (one-hot when discrete; straight-through's carry no gradient
    here) and the soft ones (N'), for the read (J R) and write (J H) heads; e (J H, d_c);
    c̄ (J H, d_c); α (J H); β and γ (J K, read heads first in each step); and M_t = [A; C_t]
    after each time step (N', W). With sequential writes the write weightings are the chosen
    cells' one-hots, without a gradient."""

    features: torch.Tensor
    hidden: torch.Tensor
    read_vectors: torch.Tensor
    read_weights: Optional[torch.Tensor] = None
    write_weights: Optional[torch.Tensor] = None
    read_probs: Optional[torch.Tensor] = None
    write_probs: Optional[torch.Tensor] = None
    erase_vectors: Optional[torch.Tensor] = None
    candidates: Optional[torch.Tensor] = None
    input_gates: Optional[torch.Tensor] = None
    key_strengths: Optional[torch.Tensor] = None
    lru_gates: Optional[torch.Tensor] = None
    memory: Optional[torch.Tensor] = None


class DNTMResult(NamedTuple):
    """``steps, state = dntm_sequence(...)``: the :class:`DNTMSteps` and the final
    :class:`DNTMCarry`."""

    steps: DNTMSteps
    state: DNTMCarry


def triton_covers(options: DNTMOptions) -> bool:
    """Whether the Triton kernels implement these options: one addressing step and learned
    writes (any mode, the GRU or feed-forward controller, any heads, LRU, NOP cell and write
    keys)."""
    return options.addressing_steps == 1 and options.writes == "learned"
