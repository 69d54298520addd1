"""Dynamic Neural Turing Machine (D-NTM).

Paper: C. Gulcehre, S. Chandar, K. Cho, Y. Bengio, "Dynamic Neural Turing Machine
with Continuous and Discrete Addressing Schemes" (2016), sections 2-5 and
appendix A, with these corrections to the paper's text (c̄ in R^{d_c}; reads use
M_{t-1}; LRU v_t = 0.1 v_{t-1} + 0.9 z_t, w_t = softmax(z_t - γ_t v_{t-1}), no
gradient through v).

Glossary
    x_t    input (I)                     h_t    controller output (d_h), drives the heads
    N      memory cells (+1 NOP cell with nop=True; N' = N + nop)
    A      address part (N' x d_a), a parameter: learned, never written
    C_t    content part (N' x d_c), C_0 = 0 at the start of every episode
    M_t    = [A; C_t], the memory (N' x (d_a + d_c)), row i is m_i = [a_i; c_i]
    R, H   read and write heads            J   addressing steps per time step
    k      key over [a; c] (d_a + d_c), for read and write heads alike (eq. 10)
    β      sharpening, softplus(.) + 1 >= 1        z  logits β S(k, m_i)
    γ      LRU gate, sigmoid(.) in (0, 1)          v  moving average of z (no gradient)
    w, u   read and write weightings (soft, or one-hot samples w~, u~)
    φ_t    read vector w^T M_{t-1} (d_a + d_c)
    e_t    erase vector (d_c), sigmoid        α_t scalar input gate, sigmoid
    c̄_t    candidate content (d_c) = ReLU(W_m h_t + α_t W_x x_t + b_m)
    features [h_t; φ_t], the output layer's input; y_t = W_o [h_t; φ_t] + b_o

Per time step t, for each addressing step j = 1..J (J = 1 is the plain D-NTM;
every step applies the same heads again with the same input x_t, like the
hops of a memory network; only the last step's h and φ reach the output):
    h_t = GRU(x_t, h_{t-1}, φ_{t-1}) or h_t = tanh(W [x_t; φ_{t-1}] + b)   eqs. 1-2
        (eq. 5 makes w_t a function of h_t, so the controller is fed the read
        vector of the previous step, as in the library's other controllers)
    read:  z_i = β S(k, m_i) on M_{t-1}; w_t = softmax(z - γ v_{t-1});
           v_t = 0.1 v_{t-1} + 0.9 z                        eqs. 8-13
           φ_t = w_t^T M_{t-1}                              eq. 5
    write: u_t the same way over M_{t-1} = [A; C_{t-1}], with its own v   eqs. 8-13
           α_t = sigmoid(u_α^T h_t + v_α^T x_t + b_α)       eq. 3
           c̄_t = ReLU(W_m h_t + α_t W_x x_t + b_m)          eq. 4
           C_t[j] = (1 - e_t u_j) ∘ C_{t-1}[j] + u_j c̄_t    eq. 6
The NOP cell (nop=True) is one more addressable row: a weighting may point at
it, but its reads return nothing and its writes are dropped (its content stays 0).

Location-based addressing (location_shifts = r > 0): NTM eqs. 7-9 (Graves et al.
2014) applied after eq. 13; an option of the authors' code, not in the paper's
D-NTM. Every head (read and write, every addressing step) also emits from h_t
    g    interpolation gate, sigmoid(.)       s  shift distribution over -r..r, softmax(.)
    γ_s  shift sharpening, 1 + softplus(.)    w^c  the weighting of eqs. 10-13
and its weighting becomes
    w^g = g w^c + (1 - g) w_{t-1}                        NTM eq. 7
    w~_i = sum_j w^g_j s_{(i - j) mod N'}                NTM eq. 8 (circular over N' rows)
    w_i = w~_i^γ_s / sum_j w~_j^γ_s                      NTM eq. 9
with w_{t-1} the same head's previous final (soft, pre-sampling) weighting, carried
in the state (``DNTMState.location``) and one-hot on cell 0 at the start, so that
shifts can move a sharp pointer from the first step. Sharpening is computed as
softmax(γ_s log(w~ + ε)), ε = 1e-8, for a finite gradient at w~ = 0. This w is the
distribution used (soft) or sampled / argmaxed (discrete) and recorded in the trace's
probabilities, so REINFORCE, the entropy bonus and λ_S act on it. r = 0 (the default)
is the paper's D-NTM. Only the per-step tensor path implements it.

Addressing modes (``addressing``): "soft" uses w, u as they are; "reinforce"
samples one-hot w~, u~ from them while training (section 4) and takes the
argmax at evaluation; "argmax" always takes the argmax (a soft-trained model
tested discretely, the paper's Discrete† column); "gumbel" (not in the paper) reads and
writes with the same one-hot samples while training but learns by straight-through
Gumbel-softmax (Jang et al. 2016) instead of REINFORCE: with g = -log E the Gumbel noise
of the sample's Exp(1) draws E and l the logits of w (z - γ v, or log w with location
shifts), the backward pass takes the gradient of the relaxed sample softmax((l + g) / τ).
1/τ is the model's ``inverse_temperature``, which ``begin_step`` sets from the training step as
ARMIN's schedule does (1 at the start, +1 every ``temperature_every`` steps, up to N' - 1);
argmax at evaluation. The erase vector is a gate
over the content features, not a distribution over cells: it acts on the cell
the write head picked, so it has no sample of its own.

Training terms outside the task loss (``DNTM.aux_loss``): REINFORCE with the
reward R = log p(y|x), normalised by running mean and standard deviation
(buffers, saved in checkpoints), an optional input-based baseline trained with
the Huber loss, the entropy bonus λ_H, the read-write consistency regulariser
(eq. 15) and next-input prediction (section 5). The soft-to-discrete
curriculum (eq. 14) is a per-minibatch switch, ``soft_minibatch``, that the
model sets in ``begin_step``, which the trainer calls each minibatch.

Speed: on CPU float32/float64 tensors with the GRU or the feed-forward controller (every
head count, J, LRU, NOP, write-key, writes and addressing mode, with or without the trace), a
sequence runs as one autograd node whose forward and backward are compiled loops over time
(the op mannlab.ops.dntm.dntm_sequence over its numba kernels; the input projections
are computed for all steps first, the weight gradients are one matrix product each after
the backward). Its outputs include the trace's probabilities, head activations and memory,
so the terms of ``aux_loss`` (REINFORCE, entropy, read-write consistency, next-input
prediction) backpropagate through it. The REINFORCE samples are drawn as torch.multinomial
draws them (one Exp(1) per probability, argmax p / E), all at once in the step loop's
order, so both paths give the same samples for a seed. ``mannlab.ops.use_kernels(False)``
or MANNLAB_KERNELS=0 select the per-step tensor path (the reference:
same values and gradients to rounding); other controllers and dtypes use it anyway. The
compiled path measured at least as fast as the tensor path at every size tried
(CPU time, one thread: training 1.3-50x, inference 1.0-44x, batch 1-250, controllers of
100-512 units; benchmarks/README.md), so it is taken wherever it applies: a batch-1 training
step of the toy-task size costs 0.25-0.6x a GRUCell step (6.6-23x before), at batch 32
1.8-7x (7-25x before). It keeps the memory for the backward only every ceil(sqrt(T J))
steps (the backward recomputes the rest from the recorded weightings) and is not twice
differentiable (its backward is not recorded). The first use compiles the kernels (about
30 s of CPU per dtype, then cached on disk). On CUDA float32 tensors the same op runs on
Triton kernels (the time loop inside one kernel each way, every addressing mode from the same
draws) with one addressing step and learned writes; other configurations take the tensor path
on the GPU.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mannlab.errors import ConfigError
from mannlab.models.base import (
    CellTemperature,
    SequenceModel,
    TemperatureCell,
    check_bool,
    check_choice,
    check_number,
    check_positive,
    run_sequence,
)
from mannlab.models.size_check import check_model_size
from mannlab.nn import addressing as ntm_addressing
from mannlab.nn import sampling, schedules
from mannlab.nn.controllers import FNNController, GRUController, make_controller
from mannlab.ops import dispatch
from mannlab.ops import dntm as dntm_op
from mannlab.ops.controller_codes import ACTIVATIONS, TANH
from mannlab.ops.dntm import (
    NOISY_MODES,
    DNTMInputs,
    DNTMLocation,
    DNTMOptions,
    DNTMState,
    DNTMStepTrace,
    DNTMTrace,
    DNTMWeights,
    DNTMWriteCounts,
    dntm_sequence,
    head_sizes,
    reference,
)
from mannlab.ops.dntm.records import LRU_DECAY, SIMILARITY_EPS, WRITE_KEYS, WRITES

ADDRESSING_MODES = ("soft", "reinforce", "argmax", "gumbel")
NEXT_INPUT_DISTRIBUTIONS = ("bernoulli", "gaussian")
REWARDS = ("sequence", "to_go", "samples", "step_samples")


# ---------------------------------------------------------------- primitives


def location_address(
    content: torch.Tensor,
    previous: torch.Tensor,
    gate: torch.Tensor,
    shift: torch.Tensor,
    gamma: torch.Tensor,
) -> torch.Tensor:
    """Location-based addressing after eq. 13 (NTM eqs. 7-9; location_shifts > 0).

    content w^c (B, K, N'), previous w_{t-1} (B, K, N'), gate g (B, K), shift s
    (B, K, 2r+1) over -r..r, gamma γ_s (B, K) >= 1 -> w (B, K, N'): interpolation,
    circular shift over the N' rows, sharpening (mannlab.nn.addressing, ε = 1e-8).
    """
    dtype = previous.dtype  # w is state: under autocast its equations run in the state's dtype
    with dispatch.state_precision(previous):
        gated = ntm_addressing.interpolate(content.to(dtype), previous, gate.to(dtype))  # NTM eq. 7
        shifted = ntm_addressing.circular_shift(gated, shift.to(dtype))  # eq. 8
        return ntm_addressing.sharpen(shifted, gamma.to(dtype))  # eq. 9


def check_shifts(location_shifts: Any, slots: int) -> int:
    """Constructor guard for location_shifts r: an int >= 0 with 2r + 1 <= N' (the shifts
    -r..r then move to distinct rows of the circular memory)."""
    if isinstance(location_shifts, bool) or not isinstance(location_shifts, int) or location_shifts < 0:
        raise ConfigError(
            "location_shifts must be an integer >= 0 (0: no location-based addressing), "
            f"got {location_shifts!r}"
        )
    if 2 * location_shifts + 1 > slots:
        raise ConfigError(
            f"location_shifts must satisfy 2 * location_shifts + 1 <= {slots} addressable cells "
            f"(memory_slots + nop), got {location_shifts}"
        )
    return location_shifts


class _LocationHeads(NamedTuple):
    """The activated head parameters of location-based addressing (location_shifts > 0) of
    one addressing step, read heads first as β and γ (the others: ops.dntm.reference's
    DNTMHeads)."""

    interpolation: torch.Tensor  # (B, R + H)  g
    shift: torch.Tensor  # (B, R + H, 2r+1)  s
    sharpening: torch.Tensor  # (B, R + H)  γ_s


# ---------------------------------------------------------------------- cell


class DNTMCell(TemperatureCell):
    """One D-NTM time step: ``features, state = cell(x_t, state)``.

    x_t (B, input_size) -> features [h_t; φ_t] (B, controller_size + R (d_a + d_c)).
    ``soft_minibatch`` (set per minibatch by the curriculum) makes a "reinforce" cell
    use the soft weightings while training.
    """

    access: torch.Tensor  # buffer: 1 for the cells a weighting reaches, 0 for the NOP cell

    def __init__(
        self,
        input_size: int,
        controller: str = "gru",
        controller_size: int = 100,
        memory_slots: int = 128,
        address_size: int = 8,
        content_size: int = 8,
        read_heads: int = 1,
        write_heads: int = 1,
        addressing_steps: int = 1,
        lru: bool = True,
        nop: bool = False,
        addressing: str = "soft",
        write_keys: str = "memory",
        location_shifts: int = 0,
        writes: str = "learned",
    ):
        super().__init__()
        self.input_size = input_size
        check_positive(
            input_size=input_size,
            controller_size=controller_size,
            memory_slots=memory_slots,
            address_size=address_size,
            content_size=content_size,
            read_heads=read_heads,
            write_heads=write_heads,
            addressing_steps=addressing_steps,
        )
        self.lru, self.nop = check_bool("lru", lru), check_bool("nop", nop)
        self.addressing = check_choice("addressing", addressing, ADDRESSING_MODES)
        self.write_keys = check_choice("write_keys", write_keys, WRITE_KEYS)
        self.writes = check_choice("writes", writes, WRITES)
        if self.writes == "sequential" and (write_heads != 1 or location_shifts):
            raise ConfigError(
                "writes='sequential' needs write_heads=1 and location_shifts=0, got "
                f"write_heads={write_heads!r}, location_shifts={location_shifts!r}"
            )
        self.slots = memory_slots + int(nop)  # N'
        self.location_shifts = check_shifts(location_shifts, self.slots)  # r
        self.address_size, self.content_size = address_size, content_size
        self.width = address_size + content_size  # d_a + d_c
        self.read_heads, self.write_heads = read_heads, write_heads
        self.addressing_steps = addressing_steps
        self.soft_minibatch = False
        self.inverse_temperature = 1.0  # 1/τ of addressing="gumbel", set by the model's begin_step
        R, H, dc = read_heads, write_heads, content_size
        self.controller = make_controller(controller, input_size, R * self.width, controller_size)
        self.features = controller_size + R * self.width
        # One layer on h_t emits every head parameter, grouped by activation (ops.dntm.head_sizes):
        #   [k^r (R*W) | k^w (H*K) | β (R+H) | γ (R+H) | e (H*d_c) | α_h (H) | W_m h + b_m (H*d_c)]
        self.write_key_size = dc if write_keys == "content" else self.width
        self.split_sizes = head_sizes(R, H, self.width, self.write_key_size, dc)
        if self.location_shifts:  # then, for NTM eqs. 7-9: [g (R+H) | s ((R+H)(2r+1)) | γ_s (R+H)]
            self.split_sizes += [R + H, (R + H) * (2 * self.location_shifts + 1), R + H]
        self.head_params = nn.Linear(controller_size, sum(self.split_sizes))
        nn.init.xavier_uniform_(self.head_params.weight, gain=1.4)
        nn.init.normal_(self.head_params.bias, std=0.01)
        # The input's share of eqs. 3-4, [W_x x_t (H*d_c) | v_α^T x_t (H)], for all steps at once.
        self.input_params = nn.Linear(input_size, H * (dc + 1), bias=False)
        self.address = nn.Parameter(torch.randn(self.slots, address_size))  # A
        access = torch.ones(self.slots)
        if nop:
            access[-1] = 0.0  # the NOP cell: reads and writes there are ignored
        self.register_buffer("access", access, persistent=False)

    def initial_state(self, batch_size: int, device=None, dtype=None) -> DNTMState:
        """C_0 = 0, φ_0 = 0, v_0 = 0 (and the controller's learned initial state); with
        location_shifts > 0, w_0 one-hot on cell 0 for every head (a sharp start, so that
        shifts move a sharp pointer; a uniform w_0 would stay uniform under any shift)."""
        ref = self.address
        zero = torch.zeros(
            (), device=ref.device if device is None else device, dtype=ref.dtype if dtype is None else dtype
        )

        def zeros(*shape: int) -> torch.Tensor:
            return zero.expand(batch_size, *shape)

        N, R, H = self.slots, self.read_heads, self.write_heads
        location: Any = ()
        if self.location_shifts:
            first = zero.new_zeros(N)
            first[0] = 1.0
            location = DNTMLocation(first.expand(batch_size, R, N), first.expand(batch_size, H, N))
        counts: Any = ()
        if self.writes == "sequential":
            counts = DNTMWriteCounts(zeros(), zeros(N))
        return DNTMState(
            controller=self.controller.initial_state(batch_size, device, dtype),
            content=zeros(N, self.content_size),
            read_vectors=zeros(R, self.width),
            read_lru=zeros(R, N),
            write_lru=zeros(H, N),
            location=location,
            counts=counts,
        )

    def precompute(self, x: torch.Tensor) -> torch.Tensor:
        """Input projections for every step at once: (B, T, I) -> (B, T, G + H (d_c + 1)),
        the controller's W x + b followed by [W_x x | v_α^T x]."""
        return torch.cat([self.controller.precompute(x), self.input_params(x)], dim=-1)

    def memory(self, content: torch.Tensor) -> torch.Tensor:
        """M = [A; C]: content C (B, N', d_c) -> (B, N', d_a + d_c)."""
        return torch.cat([self.address.expand(content.shape[0], -1, -1), content], dim=-1)

    def read(self, memory: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """φ = w^T M (eq. 5) with the NOP cell ignored: memory (B, N', W), weights (B, R, N')
        -> (B, R, W), in the memory's dtype (φ is state; autocast's product is lower)."""
        return reference.read(memory, weights, self.access)

    def write(
        self, content: torch.Tensor, weights: torch.Tensor, erase: torch.Tensor, candidate: torch.Tensor
    ) -> torch.Tensor:
        """C_t[j] = (1 - e u_j) ∘ C_{t-1}[j] + u_j c̄ (eq. 6) with the NOP cell ignored.

        content (B, N', d_c), weights u (B, H, N'), erase e (B, H, d_c), candidate c̄
        (B, H, d_c) -> (B, N', d_c); several write heads multiply their erasures and
        add their candidates.
        """
        return reference.write(content, weights, self.access, erase, candidate)

    def discrete(self) -> bool:
        """Whether this forward pass uses one-hot weightings (sampled or argmax)."""
        if self.addressing == "soft":
            return False
        return self.addressing == "argmax" or not (self.training and self.soft_minibatch)

    def _discretise(self, probs: torch.Tensor, sample: bool) -> torch.Tensor:
        """Section 4: w~ = one-hot of j ~ C(w) when sampling, of argmax(w) otherwise."""
        return sampling.sample_one_hot(probs) if sample else sampling.argmax_one_hot(probs)

    def _heads(self, h: torch.Tensor, x_write: torch.Tensor):
        """h_t (B, d_h) and the precomputed [W_x x_t | v_α^T x_t] -> the activated head
        parameters (eqs. 3-4, 9, 12) and, with location_shifts, NTM eqs. 7-9's (else None)."""
        groups = self.head_params(h).split(self.split_sizes, dim=-1)
        heads = reference.activate_heads(groups[:7], x_write, self.width)
        if not self.location_shifts:
            return heads, None
        gate, shift, sharpening = groups[7:]
        shift = shift.view(shift.shape[0], self.read_heads + self.write_heads, -1)
        return heads, _LocationHeads(
            torch.sigmoid(gate), torch.softmax(shift, dim=-1), F.softplus(sharpening) + 1
        )

    def _address(self, keys, strengths, gates, memory, average):
        """Eqs. 10-13: (probs w (B, K, N'), new LRU average v (B, K, N'), the logits of w's
        softmax (B, K, N'))."""
        return reference.weighting(
            keys, strengths, gates, memory, average, self.lru, SIMILARITY_EPS, LRU_DECAY
        )

    def sampled_heads(self) -> int:
        """The heads that sample: R + H, or R when the writes are not learned."""
        return self.read_heads + (self.write_heads if self.writes == "learned" else 0)

    def draws(self, steps: int, batch: int, like: torch.Tensor) -> torch.Tensor:
        """The Exp(1) draws E of ``steps`` addressing steps (steps, B K' N'), laid out as
        mannlab.ops.dntm.DNTMInputs.draws: per step the read heads' (B, R, N'), then the write
        heads' (B, H, N') with learned writes (K' = sampled_heads()). The compiled path draws all
        T J steps at once, the step loop's straight-through Gumbel one step at a time: torch's
        exponential_ fills both from the same stream. REINFORCE's step loop samples with
        torch.multinomial, which draws one Exp(1) per probability in this order, so the two
        paths take the same samples for a seed (tests/models/test_dntm.py)."""
        return like.new_empty(steps, batch * self.sampled_heads() * self.slots).exponential_()

    def _straight_through(self, logits, probs, exp):
        """Straight-through Gumbel-softmax at this cell's 1/τ (ops.dntm.reference.straight_through)."""
        return reference.straight_through(logits, probs, exp, self.inverse_temperature)

    @staticmethod
    def _locate(probs, previous, heads: _LocationHeads, part: slice) -> torch.Tensor:
        """NTM eqs. 7-9 for the heads in ``part`` (read heads first) of ``heads``."""
        assert heads.interpolation is not None and heads.shift is not None and heads.sharpening is not None
        return location_address(
            probs, previous, heads.interpolation[:, part], heads.shift[:, part], heads.sharpening[:, part]
        )

    def step(self, inputs: torch.Tensor, state: DNTMState, with_trace: bool = False):
        """One time step from the precomputed inputs; returns ([h_t; φ_t], state, trace or None)."""
        ctrl, content, reads, read_v, write_v, location, counts = state
        x_proj, x_write = inputs.split(
            [inputs.shape[-1] - self.input_params.out_features, self.input_params.out_features], dim=-1
        )
        R = self.read_heads
        discrete = self.discrete()
        sample = discrete and self.addressing == "reinforce" and self.training
        gumbel = discrete and self.addressing == "gumbel" and self.training
        record = []
        for _ in range(self.addressing_steps):
            h, h_out, ctrl = self.controller.step(x_proj, reads.flatten(1), ctrl)  # eqs. 1-2
            heads, location_heads = self._heads(h, x_write)
            memory = self.memory(content)  # M_{t-1} = [A; C]
            read_p, read_v, read_l = self._address(
                heads.read_keys, heads.strengths[:, :R], heads.gates[:, :R], memory, read_v
            )
            write_mem = content if self.write_keys == "content" else memory
            if self.writes == "learned":
                write_p, write_v, write_l = self._address(
                    heads.write_keys, heads.strengths[:, R:], heads.gates[:, R:], write_mem, write_v
                )
            if self.location_shifts:  # NTM eqs. 7-9 after eq. 13, from each head's previous w
                read_p = self._locate(read_p, location.read, location_heads, slice(None, R))
                write_p = self._locate(write_p, location.write, location_heads, slice(R, None))
                location = DNTMLocation(read_p, write_p)
                tiny = torch.finfo(read_p.dtype).tiny  # w is no softmax here: its logits are log w
                read_l, write_l = read_p.clamp_min(tiny).log(), write_p.clamp_min(tiny).log()
            if gumbel:
                exp = self.draws(1, h.shape[0], h)[0]
                read_w = self._straight_through(read_l, read_p, exp[: read_p.numel()].view_as(read_p))
            else:
                read_w = self._discretise(read_p, sample) if discrete else read_p
            if self.writes == "sequential":  # not learned: no distribution to sample
                counts = DNTMWriteCounts(counts.written, counts.reads + read_w.detach().sum(1))
                write_w = write_p = reference.sequential_write(counts.written, counts.reads, self.nop)
                counts = DNTMWriteCounts(counts.written + 1, counts.reads)
            elif gumbel:
                write_w = self._straight_through(write_l, write_p, exp[read_p.numel() :].view_as(write_p))
            else:
                write_w = self._discretise(write_p, sample) if discrete else write_p
            reads = self.read(memory, read_w)  # eq. 5
            content = self.write(content, write_w, heads.erase, heads.candidate)  # eq. 6
            if with_trace:  # straight-through's one-hots as values (its gradient is the step's)
                hard = (read_w.detach(), write_w.detach()) if gumbel else (read_w, write_w)
                record.append((*hard, read_p, write_p, heads))
        features = torch.cat([h_out, reads.flatten(1)], dim=-1)
        state = DNTMState(ctrl, content, reads, read_v, write_v, location, counts)
        trace = self._trace(record, reads, h_out, sample, content) if with_trace else None
        return features, state, trace

    # ------------------------------------------------------ the whole-sequence op

    op = dntm_op

    def op_options(self, with_trace: bool, backward: bool) -> Optional[DNTMOptions]:
        """The op's options; None where the op has no word for the configuration: location-based
        addressing, controllers other than the GRU and the feed-forward one, or a feed-forward
        activation without a code (records.covers says which backends run the rest)."""
        controller = self.controller
        if self.location_shifts:
            return None
        if type(controller) is GRUController:
            activation: Optional[int] = TANH
        elif type(controller) is FNNController:
            activation = ACTIVATIONS.get(controller.activation)
        else:
            return None
        if activation is None:
            return None
        return DNTMOptions(
            mode=self._op_mode(),
            addressing_steps=self.addressing_steps,
            lru=self.lru,
            nop=self.nop,
            write_keys=self.write_keys,
            writes=self.writes,
            inverse_temperature=float(self.inverse_temperature),
            keep=backward,
            trace=with_trace,
            similarity_eps=SIMILARITY_EPS,
            lru_decay=LRU_DECAY,
            activation=activation,
        )

    def _op_mode(self) -> str:
        """The op's addressing mode for this pass: section 4's samples in training (REINFORCE's
        or straight-through's), else argmax, for the discrete modes."""
        if not self.discrete():
            return "soft"
        mode = "argmax" if not self.training or self.addressing == "argmax" else self.addressing
        return "sample" if mode == "reinforce" else mode

    def op_weights(self) -> DNTMWeights:
        controller = self.controller
        return DNTMWeights(
            read_weight=controller.read_weight,
            recurrent_weight=controller.recurrent_weight if type(controller) is GRUController else None,
            recurrent_bias=controller.recurrent_bias if type(controller) is GRUController else None,
            head_weight=self.head_params.weight,
            head_bias=self.head_params.bias,
            address=self.address,
        )

    def run_op(
        self, x: torch.Tensor, state: DNTMState, options: DNTMOptions, weights: DNTMWeights, backend: str
    ):
        """All steps of x (B, T, I) through mannlab.ops.dntm.dntm_sequence on ``backend``, the
        draws of all T J addressing steps first (as the step loop draws them)."""
        B, T = x.shape[:2]
        draws = self.draws(T * self.addressing_steps, B, x) if options.mode in NOISY_MODES else None
        return dntm_sequence(DNTMInputs(self.precompute(x), draws), state, weights, options, backend)

    def _trace(self, record, reads, h_out, sample, content) -> DNTMStepTrace:
        def cat(i, field=None):
            return torch.cat([r[i] if field is None else getattr(r[4], field) for r in record], 1)

        flag = h_out.new_full((h_out.shape[0],), float(sample))
        return DNTMStepTrace(
            cat(0),
            cat(1),
            cat(2),
            cat(3),
            reads,
            cat(4, "erase"),
            cat(4, "candidate"),
            cat(4, "input_gate"),
            cat(4, "strengths"),
            cat(4, "gates"),
            h_out,
            flag,
            self.memory(content),
        )


# ------------------------------------------------------------- training terms


class InputBaseline(nn.Module):
    """Input-based baseline b(x) (Mnih & Gregor 2014): x (B, T, I) -> (B,).

    b(x) = w^T mean_t ReLU(W x_t + c) + d, a function of the input only, so
    subtracting it leaves the REINFORCE estimator unbiased.
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden = nn.Linear(input_size, hidden_size)
        self.out = nn.Linear(hidden_size, 1)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(inputs)).mean(dim=1)).squeeze(-1)


def read_write_consistency(
    read_probs: torch.Tensor, write_probs: torch.Tensor, read_heads: int, write_heads: int
) -> torch.Tensor:
    """Eq. 15 per sequence: sum_{t'} || 1 - ((1/t') sum_{t <= t'} u_t)^T w_{t'} ||^2 / T'.

    read_probs (B, T, J*R, N'), write_probs (B, T, J*H, N') -> (B,). Addressing steps
    count as time steps (T' = T J); several write heads are averaged, and every read
    head is compared with that average. Divided by T' (a per-step mean, like the task
    loss), which only rescales the coefficient λ.
    """
    B, T, _, N = read_probs.shape
    reads = read_probs.reshape(B, -1, read_heads, N)  # (B, T', R, N')
    writes = write_probs.reshape(B, -1, write_heads, N).mean(2)  # (B, T', N')
    steps = torch.arange(1, writes.shape[1] + 1, dtype=writes.dtype, device=writes.device)
    mean_writes = writes.cumsum(1) / steps.view(1, -1, 1)  # (1/t') sum u_t
    overlap = (reads * mean_writes.unsqueeze(2)).sum(-1)  # (B, T', R)
    return (1 - overlap).pow(2).sum(-1).mean(1)


# -------------------------------------------------------------------- module


class DNTM(CellTemperature, SequenceModel):
    """Dynamic Neural Turing Machine (Gulcehre et al. 2016), shaped like torch.nn.LSTM.

    ``y, state = model(x)`` runs a whole sequence; the content part of the memory starts
    from zero at every call unless a ``state`` is passed in (to carry memory over
    segments). ``model(x, return_trace=True)`` adds a :class:`DNTMTrace` (weightings,
    samples and what ``aux_loss`` needs). The memory is [A; C]: a learned address part A
    (N' x d_a), never written, and a content part C (N' x d_c); N' = N + 1 with the NOP
    cell. The module docstring gives the equations.

    Shapes (B batch, T steps; with ``batch_first=False`` x and y are (T, B, ...)):

    - x: (B, T, input_size)
    - y: logits (B, T, output_size); with ``output_size=None`` the features
      [h_t; φ_t], (B, T, controller_size + read_heads * (address_size + content_size))
    - state: :class:`DNTMState`: controller state, content C (B, N', d_c), read vectors
      φ (B, R, d_a + d_c), the LRU averages of the read and write heads, and the
      location or write-count state of the options that need one

    Args:
        input_size (int): features per step of x.
        output_size (int | None): logits per step of y, from a linear layer on
            [h_t; φ_t]; None returns the features. Default: None.
        controller (str): "gru" (eq. 1) or "fnn" (eq. 2); any name of
            ``mannlab.nn.controllers.CONTROLLERS`` works. Default: "gru".
        controller_size (int): the controller's units (h_t). Default: 100.
        memory_slots (int): N, the memory's cells. Default: 128.
        address_size (int): d_a, the learned address part's width. Default: 8.
        content_size (int): d_c, the content part's width. Default: 8.
        read_heads (int): R, read heads. Default: 1.
        write_heads (int): write heads. Default: 1.
        addressing_steps (int): J, addressing steps per time step (the same heads
            applied again, like a memory network's hops). Default: 1.
        lru (bool): least-recently-used addressing (section 3.3). Default: True.
        nop (bool): one extra NOP cell whose reads return nothing and whose writes are
            dropped. Default: False.
        addressing (str): "soft" (continuous weightings), "reinforce" (one-hot samples
            while training, section 4; argmax at evaluation), "argmax" (a soft-trained
            model tested discretely) or "gumbel" (one-hot samples learned by
            straight-through Gumbel-softmax; not in the paper). Default: "soft".
        write_keys (str): "memory" (write keys over [a_i; c_i], eq. 10) or "content"
            (over C alone: while C is zero every write weighting is uniform, so writes
            cannot learn where to go). Default: "memory".
        location_shifts (int): r > 0 adds NTM-style interpolation, shifts by -r..r and
            sharpening after eq. 13 (an option of the authors' code; per-step tensor
            path only); 0 is the paper's D-NTM. Default: 0.
        writes (str): "learned" (the paper's write head) or "sequential" (not learned:
            cell n for the n-th write while cells remain unwritten, then the cell read
            least so far; one write head). Default: "learned".
        curriculum_p0 (float): p_0 of the soft-to-discrete curriculum (eq. 14), 0 = off;
            "reinforce" only. Default: 0.0.
        curriculum_every (int): the curriculum's t counts blocks of this many
            minibatches. Default: 1.
        reinforce_weight (float): weight of the REINFORCE term (1 = the paper's cost).
            Default: 1.0.
        entropy_weight (float): λ_H, the entropy bonus. Default: 0.0.
        input_baseline (bool): an input-based baseline for REINFORCE, trained with the
            Huber loss. Default: False.
        reward_momentum (float): momentum of the running reward moments that normalise
            the reward. Default: 0.9.
        reward (str): what scores a sample: "sequence" (R = log p(y|x), section 4),
            "to_go" (the log-likelihood from that step on, less a leave-one-out
            baseline), "samples" (R less the mean R of the same input's other samples;
            needs train.samples_per_input >= 2) or "step_samples" (each read by its own
            step's log-likelihood). Default: "sequence".
        read_discount (float): with reward="to_go", the read samples' returns discounted
            by this factor per step (0: a read scored by its own step alone).
            Default: 1.0.
        sharpen_weight (float): λ_S, an entropy penalty on the soft weightings that
            drives a soft-trained solution towards one cell per head. Default: 0.0.
        read_write_consistency (float): λ of the read-write consistency regulariser,
            eq. 15. Default: 0.0.
        next_input_prediction (float): weight of the next-input prediction loss
            (section 5). Default: 0.0.
        next_input_distribution (str): "bernoulli" (binary inputs) or "gaussian".
            Default: "bernoulli".
        temperature_every (int): with addressing="gumbel", training steps per +1 of 1/τ
            (up to N' - 1; 0 keeps it at 1). Default: 200.
        batch_first (bool): True: x and y are (B, T, features); False: (T, B, features).
            Default: True.
    """

    cell: DNTMCell
    predictor: Optional[nn.Linear]  # next-input prediction
    baseline: Optional[InputBaseline]
    reward_stats: sampling.RunningMoments
    read_reward_stats: sampling.RunningMoments  # with read_discount < 1 or reward="step_samples"
    read_discount: float

    def __init__(
        self,
        input_size: int,
        output_size: Optional[int] = None,
        controller: str = "gru",
        controller_size: int = 100,
        memory_slots: int = 128,
        address_size: int = 8,
        content_size: int = 8,
        read_heads: int = 1,
        write_heads: int = 1,
        addressing_steps: int = 1,
        lru: bool = True,
        nop: bool = False,
        addressing: str = "soft",
        write_keys: str = "memory",
        location_shifts: int = 0,
        writes: str = "learned",
        curriculum_p0: float = 0.0,
        curriculum_every: int = 1,
        reinforce_weight: float = 1.0,
        entropy_weight: float = 0.0,
        input_baseline: bool = False,
        reward_momentum: float = 0.9,
        reward: str = "sequence",
        read_discount: float = 1.0,
        sharpen_weight: float = 0.0,
        read_write_consistency: float = 0.0,
        next_input_prediction: float = 0.0,
        next_input_distribution: str = "bernoulli",
        temperature_every: int = 200,
        batch_first: bool = True,
    ):
        check_model_size("DNTM", locals())  # refuse sizes that cannot fit, before building
        check_positive(
            controller_size=controller_size,
            read_heads=read_heads,
            address_size=address_size,
            content_size=content_size,
        )
        super().__init__(
            input_size, output_size, controller_size + read_heads * (address_size + content_size), batch_first
        )
        self.cell = DNTMCell(
            input_size,
            controller,
            controller_size,
            memory_slots,
            address_size,
            content_size,
            read_heads,
            write_heads,
            addressing_steps,
            lru,
            nop,
            addressing,
            write_keys,
            location_shifts=location_shifts,
            writes=writes,
        )
        reinforce = addressing == "reinforce"
        if (
            isinstance(temperature_every, bool)
            or not isinstance(temperature_every, int)
            or temperature_every < 0
        ):
            raise ConfigError(
                f"temperature_every must be an integer >= 0 (0: 1/τ stays 1), got {temperature_every!r}"
            )
        self.temperature_every = temperature_every
        self.curriculum_p0 = check_number("curriculum_p0", curriculum_p0, 0, 1.0)
        check_positive(curriculum_every=curriculum_every)
        self.curriculum_every = int(curriculum_every)
        self.reinforce_weight = check_number("reinforce_weight", reinforce_weight, 0)
        self.entropy_weight = check_number("entropy_weight", entropy_weight, 0)
        self.sharpen_weight = check_number("sharpen_weight", sharpen_weight, 0)
        self.rw_weight = check_number("read_write_consistency", read_write_consistency, 0)
        self.prediction_weight = check_number("next_input_prediction", next_input_prediction, 0)
        self.next_input_distribution = check_choice(
            "next_input_distribution", next_input_distribution, NEXT_INPUT_DISTRIBUTIONS
        )
        input_baseline = check_bool("input_baseline", input_baseline)
        if not reinforce and (self.curriculum_p0 or input_baseline):
            raise ConfigError(
                f"curriculum_p0 and input_baseline need addressing='reinforce', got addressing={addressing!r}"
            )
        self.reward = check_choice("reward", reward, REWARDS)
        if self.reward != "sequence" and input_baseline:
            raise ConfigError(
                f"input_baseline is the baseline of reward='sequence'; reward={self.reward!r} has its own"
            )
        if not (isinstance(reward_momentum, numbers.Real) and 0 <= reward_momentum < 1):
            raise ConfigError(f"reward_momentum must be in [0, 1), got {reward_momentum!r}")
        self.reward_stats = sampling.RunningMoments(momentum=float(reward_momentum))
        self.read_discount = check_number("read_discount", read_discount, 0, 1.0)
        if self.read_discount < 1.0 and self.reward != "to_go":
            raise ConfigError(f"read_discount applies to reward='to_go', got reward={self.reward!r}")
        if self.read_discount < 1.0 or self.reward == "step_samples":
            self.read_reward_stats = sampling.RunningMoments(momentum=float(reward_momentum))
        self.baseline = InputBaseline(input_size, controller_size) if input_baseline else None
        self.predictor = nn.Linear(self.cell.features, input_size) if self.prediction_weight else None
        self.uses_aux_loss = bool(
            reinforce
            or self.entropy_weight
            or self.sharpen_weight
            or self.rw_weight
            or self.prediction_weight
        )

    @property
    def temperature_schedule(self):
        """(every, maximum = N' - 1) of 1/τ for begin_step with addressing="gumbel"
        and temperature_every > 0, else None (1/τ stays where it is, 1 unless set)."""
        if not self.temperature_every or self.cell.addressing != "gumbel":
            return None
        return self.temperature_every, max(1, self.cell.slots - 1)

    def begin_step(self, step: int, coin: Optional[Callable[[float], bool]] = None) -> None:
        """The soft-to-discrete curriculum of training step ``step`` (eq. 14): with
        curriculum_p0 > 0, ``soft_minibatch`` = π ~ Bernoulli(p_t), p_t = p0 / sqrt(1 + t),
        t = step // curriculum_every, drawn by ``coin`` (default: torch's RNG); then the
        gumbel temperature (CellTemperature)."""
        if self.curriculum_p0:
            t = step // self.curriculum_every
            self.soft_minibatch = (coin or schedules.bernoulli)(schedules.inverse_sqrt(self.curriculum_p0, t))
        super().begin_step(step, coin)

    @property
    def soft_minibatch(self) -> bool:
        """π_t of eq. 14 for the current minibatch: True uses the soft weightings."""
        return self.cell.soft_minibatch

    @soft_minibatch.setter
    def soft_minibatch(self, value: bool) -> None:
        self.cell.soft_minibatch = bool(value)

    def _run(self, x: torch.Tensor, state: Any, with_trace: bool):
        features, state, steps = run_sequence(self.cell, x, state, with_trace)
        return features, state, (DNTMTrace._make((*steps, x)) if with_trace else None)

    def aux_loss(
        self,
        trace: DNTMTrace,
        step_nll: torch.Tensor,
        outputs_per_step: Optional[int] = None,
        reducer: Optional[sampling.Reducer] = None,
    ) -> torch.Tensor:
        """Training terms besides the task loss, a 0-dim tensor (see :meth:`aux_terms`)."""
        terms = self.aux_terms(trace, step_nll, outputs_per_step, reducer)
        return sum(terms.values(), step_nll.new_zeros(()))

    def aux_terms(
        self,
        trace: DNTMTrace,
        step_nll: torch.Tensor,
        outputs_per_step: Optional[int] = None,
        reducer: Optional[sampling.Reducer] = None,
    ) -> dict[str, torch.Tensor]:
        """Each training term by name, means over the batch.

        step_nll (B, T): -log p(y_t | x_{1:t}) of each step summed over its outputs (0
        where not scored), no gradient. Terms present only when switched on:

        - ``reinforce`` (section 4, minibatches with sampled weights): R = -sum_t step_nll,
          R~ = (R - b) / sqrt(σ^2 + ε) with the running moments (updated in training mode),
          minus b(x) with the input baseline;
          -reinforce_weight R~ sum_{t,j,heads} (log p(w~) + log p(u~)) / S
        - ``baseline``: Huber(b(x) - R~), the input baseline's own loss
        - ``entropy``: -λ_H sum_{t,j,heads} (H(w) + H(u)) / S
        - ``sharpen``: +λ_S sum_{t,j,heads} (H(w) + H(u)) / S over the sequences that used
          the soft weightings (all of them with addressing="soft")
        - ``read_write``: λ R_rw (eq. 15), per step
        - ``next_input``: weight * -log p(x_{t+1} | [h_t; φ_t]) per step and input feature sum

        S is the mean number of terms the task loss averages over per sequence: scored steps
        (step_nll > 0) times ``outputs_per_step`` (the output bits of a BCE task, the
        default; 1 for a categorical task). The cost of section 4 sums the NLL and these
        terms over the sequence; the task loss is that NLL divided by S, so dividing the
        terms by S keeps the paper's ratio. ``reducer``: the batch statistics (S, the baselines,
        the running moments) over the global batch (see Model.aux_loss).
        """
        scored = self._scored_outputs(trace, DNTMTrace, step_nll, outputs_per_step, reducer)  # S
        terms: dict[str, torch.Tensor] = {}
        sampled = trace.sampled.amax(1)  # (B,)
        if self.cell.addressing == "reinforce" and bool(sampled.any()):
            terms.update(self._reinforce(trace, step_nll.detach(), sampled, scored, reducer))
        if self.entropy_weight or self.sharpen_weight:
            reads, writes = sampling.entropy(trace.read_probs), sampling.entropy(trace.write_probs)
            ent = reads.sum((1, 2)) + writes.sum((1, 2))
        if self.entropy_weight:
            terms["entropy"] = -self.entropy_weight * ent.mean() / scored
        if self.sharpen_weight:
            soft_rows = 1.0 - sampled.to(ent.dtype)
            terms["sharpen"] = self.sharpen_weight * (ent * soft_rows).mean() / scored
        if self.rw_weight:
            terms["read_write"] = (
                self.rw_weight
                * read_write_consistency(
                    trace.read_probs, trace.write_probs, self.cell.read_heads, self.cell.write_heads
                ).mean()
            )
        if self.predictor is not None and step_nll.shape[1] > 1:
            terms["next_input"] = self.prediction_weight * self._next_input(trace)
        return terms

    def _reinforce(self, trace: DNTMTrace, step_nll, sampled, scored, reducer) -> dict[str, torch.Tensor]:
        if self.reward == "to_go":
            return self._reinforce_to_go(trace, step_nll, sampled, scored, reducer)
        if self.reward == "step_samples":
            return self._reinforce_step_samples(trace, step_nll, sampled, scored, reducer)
        reward = -step_nll.sum(1)  # R = log p(y|x)
        if self.reward == "samples":  # less the mean reward of the input's other samples
            reward = reward - sampling.same_input_leave_one_out_mean(reward, trace.inputs, reducer)
        advantage = self._normalised(reward, sampled, reducer)
        terms = {}
        if self.baseline is not None:
            predicted = self.baseline(trace.inputs.detach())  # never trains an input encoder
            terms["baseline"] = (sampling.huber(predicted - advantage) * sampled).mean()
            advantage = advantage - predicted.detach()
        log_p = self._step_log_p(trace).sum(1)  # (B,)
        terms["reinforce"] = (
            self.reinforce_weight * (sampling.reinforce_surrogate(log_p, advantage) * sampled).mean() / scored
        )
        return terms

    def _normalised(self, reward: torch.Tensor, sampled: torch.Tensor, reducer) -> torch.Tensor:
        """reward (B, ...) centred and scaled by the running moments of earlier minibatches,
        which then take in this one's sampled rows (in training mode only)."""
        return self.reward_stats.advantage(reward, sampled > 0, update=self.training, reducer=reducer)

    def _reinforce_to_go(
        self, trace: DNTMTrace, step_nll, sampled, scored, reducer
    ) -> dict[str, torch.Tensor]:
        """REINFORCE with each step's samples scored by the log-likelihood still to come:
        G_t = sum_{j >= t} (r_j - b_j), r_j = log p(y_j | ...), b_j the mean of r_j over the
        other sequences of the minibatch (leave-one-out), normalised by running moments.
        A step's samples cannot change the outputs before it, so dropping those rewards (and
        subtracting b_j, which does not depend on the sequence's own samples) leaves the
        gradient's expectation that of section 4's R = log p(y|x); its variance is lower."""
        rewards, scored_steps = -step_nll, (step_nll > 0)  # r_j (B, T)
        baseline = sampling.leave_one_out_mean(rewards, scored_steps, reducer)  # b_j
        centred = (rewards - baseline) * scored_steps
        returns = sampling.discounted_returns(centred, 1.0)
        advantage = self._normalised(returns, sampled, reducer)
        read_log_p, write_log_p = self._step_log_p(trace, split=True)
        if self.read_discount < 1.0:  # reads scored by the nearer rewards, with their own moments
            read_returns = sampling.discounted_returns(centred, self.read_discount)
            read_advantage = self.read_reward_stats.advantage(
                read_returns, sampled > 0, update=self.training, reducer=reducer
            )
        else:
            read_advantage = advantage
        surrogate = (
            sampling.reinforce_surrogate(read_log_p, read_advantage)
            + sampling.reinforce_surrogate(write_log_p, advantage)
        ).sum(1) * sampled
        return {"reinforce": self.reinforce_weight * surrogate.mean() / scored}

    def _reinforce_step_samples(
        self, trace: DNTMTrace, step_nll, sampled, scored, reducer
    ) -> dict[str, torch.Tensor]:
        """REINFORCE with per-step read credit: the read samples of step t scored by that
        step's log-likelihood r_t alone, less the mean r_t of the other samples of the same
        input (train.samples_per_input >= 2), scaled by running moments of their own; learned
        write samples scored by the sequence's R less the same mean over the input's samples
        (reward="samples"). Scoring a read by its own step is biased (the read also feeds the
        controller, and so later steps) and far less noisy than R."""
        rewards, scored_steps = -step_nll, (step_nll > 0)  # r_t (B, T)
        baseline = torch.stack(
            [sampling.same_input_leave_one_out_mean(r, trace.inputs, reducer) for r in rewards.unbind(1)], 1
        )
        rows = scored_steps & (sampled > 0).unsqueeze(1)
        read_advantage = self.read_reward_stats.advantage(
            rewards - baseline, rows, update=self.training, reducer=reducer
        )
        read_advantage = read_advantage * scored_steps  # unscored steps carry no credit
        total = rewards.sum(1)  # R = log p(y|x)
        write_advantage = self._normalised(
            total - sampling.same_input_leave_one_out_mean(total, trace.inputs, reducer), sampled, reducer
        )
        read_log_p, write_log_p = self._step_log_p(trace, split=True)
        surrogate = (
            sampling.reinforce_surrogate(read_log_p, read_advantage).sum(1)
            + sampling.reinforce_surrogate(write_log_p.sum(1), write_advantage)
        ) * sampled
        return {"reinforce": self.reinforce_weight * surrogate.mean() / scored}

    @staticmethod
    def _step_log_p(trace: DNTMTrace, split: bool = False):
        """log p of each step's samples, all heads and addressing steps: (B, T), or the
        read and write parts apart with ``split``."""
        read = sampling.log_prob(trace.read_weights, trace.read_probs).sum(2)
        write = sampling.log_prob(trace.write_weights, trace.write_probs).sum(2)
        return (read, write) if split else read + write

    def _next_input(self, trace: DNTMTrace) -> torch.Tensor:
        features = torch.cat([trace.hidden, trace.read_vectors.flatten(2)], dim=-1)
        # the target carries no gradient: a trained input encoder in front of the model (bAbI's
        # fact encoder) could otherwise make its facts easy to predict by collapsing them
        assert self.predictor is not None  # aux_terms asks for this term only with one
        predicted, target = self.predictor(features[:, :-1]), trace.inputs[:, 1:].detach()
        if self.next_input_distribution == "bernoulli":
            if target.min() < 0 or target.max() > 1:
                raise ValueError(
                    "next_input_distribution='bernoulli' needs inputs in [0, 1]; "
                    "use 'gaussian' for real-valued inputs"
                )
            nll = F.binary_cross_entropy_with_logits(predicted, target, reduction="none")
        else:
            nll = 0.5 * (predicted - target).pow(2)
        return nll.sum(-1).mean()
