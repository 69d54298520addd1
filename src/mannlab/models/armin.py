"""ARMIN: Auto-addressing and Recurrent Memory Integrating Network.

Paper: "Sequence Modelling with Auto-Addressing and Recurrent Memory Integrating
Networks" (ICLR 2019 submission), sections 2-5 and appendices B, C, E, with the
these corrections to the paper's text: W_ig has d_h + d_r output rows; 1/τ starts at 1
and grows by 1 per epoch (per 200 iterations on algorithmic tasks) up to n_mem - 1.

Glossary
    x_t        input (d_i)                      h_t   hidden state (d_h), the only recurrence
    M          memory (n_mem x d_r) of past hidden states, M_0 a learned parameter
    s_t        read weights (n_mem), one-hot     r_t   historical state read, s_t^T M (d_r)
    g^h, g^r   control gates (eq. 3)             h^g, r^g  gated h_{t-1}, r_t (eqs. 4-5)
    i, f, g    input gate, forget gate, cell candidate (eq. 6)
    o^h, o^r   output gates of h_t and r_t (eq. 6); o_t the output (d_h + d_r, eq. 8)
    LN         layer normalisation (appendix C: on eqs. 3, 6 and 7)

Per time step (read, cell, write):
    s_t = gumbel-softmax(W_s [x_t, h_{t-1}] + b_s)      eq. 9 (straight-through one-hot)
    r_t = sum_i s_t(i) M(i, :)                           eq. 10
    [g^h; g^r] = σ(LN(W_ig [x_t, h_{t-1}, r_t] + b_ig))  eq. 3
    h^g_{t-1} = g^h ∘ h_{t-1};  r^g_t = g^r ∘ r_t        eqs. 4-5
    [i; f; g; o^h; o^r] = σ,σ,tanh,σ,σ(LN(W_go [x_t, h^g_{t-1}, r^g_t] + b_go))   eq. 6
    h_t = LN(f ∘ h_{t-1} + i ∘ g)                        eq. 7 (then zoneout)
    o_t = [o^h ∘ tanh(h_t), o^r ∘ tanh(r_t)]             eq. 8
    write: h_t (W_w h_t when d_h != d_r) into the next empty slot while any is left
           (slot n at step n < n_mem), then into the slot just read (section 3.3)

Addressing (``addressing``): "gumbel" (eq. 9; 1/τ from the training schedule; the one-hot of
the sample forward, the relaxed sample's gradient backward: straight-through),
"gumbel-relaxed" (the relaxed sample y of eq. 1 itself as read and write weights: section 2.1
and appendix C describe y, and section 5 replaces the gumbel-softmax by an argmax only at
inference; the paper does not say which of the two it trained with), "soft" (plain softmax
reads and writes: table 7's "smooth read/write"), "argmax".
Evaluation uses the argmax (except "soft"), and then the fast inference path of
section 5: an index gather for the read and an index scatter for the write
instead of the weighted sums (``fast_inference``; the same numbers).

Speed: a trace-free pass of the paper's configuration (auto read, tied write, control gates,
layer norm; zoneout or not) runs the whole sequence as one autograd node whose forward and
backward are kernels (mannlab.ops.armin.armin_sequence; the per-step input projections are
computed for all steps first): numba loops on CPU float32/float64 tensors, Triton kernels on
CUDA float32 tensors (d_h, d_r, n_mem up to 128; ``use_kernels("triton")`` forces them on the
CPU, in Triton's interpreter). ``mannlab.ops.use_kernels(False)`` or MANNLAB_KERNELS=0 select
the per-step tensor path (same values and gradients to rounding; the Gumbel noise and zoneout
masks are drawn in the same order, so also the same samples).

Ablations of table 7 (appendix E) as switches: ``read="random"`` (a uniformly random
slot), ``write="queue"`` (first in, first out: slot n mod n_mem), ``write="independent"``
(a second auto-addressing head over [x_t, h_t] picks the slot to write),
``addressing="soft"``, ``control_gates=False`` (eq. 6 takes [x_t, h_{t-1}, r_t]
ungated); and ``read="tardis"``, ARMIN+TARDIS-addr (appendix B.2, eq. 21: the read
MLP of mannlab.models.tardis over [h_{t-1}, x_t, [A; M(i)], u_t] with a fixed random
sparse address part A of ``address_size`` features and the last-read penalty).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from mannlab.errors import ConfigError
from mannlab.models.base import (
    CellTemperature,
    SequenceModel,
    TemperatureCell,
    batched,
    check_bool,
    check_choice,
    check_integer,
    check_number,
    check_positive,
    run_sequence,
    size_or_default,
)
from mannlab.models.size_check import check_model_size
from mannlab.models.tardis import (
    TardisAddressing,
    default_nonzeros,
    sequential_slots,
    smallest_address_size,
    sparse_addresses,
    write_rows,
)
from mannlab.nn import sampling
from mannlab.ops import armin as armin_op
from mannlab.ops.armin import ARMINInputs, ARMINOptions, ARMINState, ARMINTrace, ARMINWeights, armin_sequence

__all__ = ["ARMIN", "ARMINCell", "ARMINState", "ARMINTrace"]

ADDRESSING_MODES = ("gumbel", "gumbel-relaxed", "soft", "argmax")
READ_MODES = ("auto", "random", "tardis")
WRITE_MODES = ("tied", "queue", "independent")


def _orthogonal_blocks(weight: torch.Tensor, block: int) -> None:
    """Orthogonal initialisation of each block of ``block`` output rows (appendix C). On one
    thread: torch's QR of a small block is far slower on several threads of a busy CPU
    (docs/DECISIONS.md)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for start in range(0, weight.shape[0], block):
                nn.init.orthogonal_(weight[start : start + block])
    finally:
        torch.set_num_threads(threads)


class ARMINCell(TemperatureCell):
    """One ARMIN step: ``features, state = cell(x_t, state)``; x_t (B, d_i) -> o_t
    (B, d_h + d_r)."""

    address: torch.Tensor  # buffer, with read="tardis": the fixed sparse address rows

    def __init__(
        self,
        input_size: int,
        hidden_size: int = 100,
        memory_slots: int = 50,
        memory_width: Optional[int] = None,
        addressing: str = "gumbel",
        read: str = "auto",
        write: str = "tied",
        control_gates: bool = True,
        layer_norm: bool = True,
        zoneout: float = 0.0,
        address_size: Optional[int] = None,
        read_mlp_size: Optional[int] = None,
        address_seed: int = 0,
    ):
        super().__init__()
        self.input_size = input_size
        check_positive(input_size=input_size, hidden_size=hidden_size, memory_slots=memory_slots)
        memory_width = size_or_default(memory_width, hidden_size)
        check_positive(memory_width=memory_width)
        self.addressing = check_choice("addressing", addressing, ADDRESSING_MODES)
        self.read_mode = check_choice("read", read, READ_MODES)
        if read != "tardis" and (address_size, read_mlp_size) != (None, None):
            raise ConfigError(
                "address_size and read_mlp_size are the sizes of the TARDIS read "
                f"(read='tardis'); with read={read!r} leave them out"
            )
        self.write_mode = check_choice("write", write, WRITE_MODES)
        self.control_gates = check_bool("control_gates", control_gates)
        self.layer_norm = check_bool("layer_norm", layer_norm)
        check_integer("address_seed", address_seed)  # used by read="tardis" only, but never wrong
        self.zoneout = check_number("zoneout", zoneout, 0.0, 1.0, high_open=True)
        self.hidden_size, self.slots, self.width = hidden_size, memory_slots, memory_width
        self.features = hidden_size + memory_width
        self.inverse_temperature = 1.0  # set by the model's begin_step
        self.fast_inference = True
        dh, dr, n = hidden_size, memory_width, memory_slots
        self.sizes = [dh + dr, 4 * dh + dr, n, n]  # x parts: eq. 3 | eq. 6 | W_s | write head
        self.input_proj = nn.Linear(input_size, sum(self.sizes))  # W_{.,x} x_t + b
        # W_ig and W_s on h_{t-1} as one matrix [W_ig,h; W_s,h] (one product per step)
        self.control_h = nn.Linear(dh, dh + dr + n, bias=False)
        self.control_r = nn.Linear(dr, dh + dr, bias=False)  # W_ig on r_t
        self.gates_h = nn.Linear(dh, 4 * dh + dr, bias=False)  # W_go on h^g_{t-1}
        self.gates_r = nn.Linear(dr, 4 * dh + dr, bias=False)  # W_go on r^g_t
        self.write_address_h = nn.Linear(dh, n, bias=False) if write == "independent" else None
        self.write_map = nn.Linear(dh, dr, bias=False) if dh != dr else None  # section 3.3
        self.ln_control = nn.LayerNorm(dh + dr) if layer_norm else None
        self.ln_gates = nn.LayerNorm(4 * dh + dr) if layer_norm else None
        self.ln_hidden = nn.LayerNorm(dh) if layer_norm else None
        self.h0 = nn.Parameter(torch.zeros(dh))
        self.initial_memory = nn.Parameter(torch.zeros(n, dr))
        self.tardis = None
        if read == "tardis":
            # ~1/5 of the content, but never too few features to give every slot its own address
            address_size = size_or_default(address_size, max(1, round(dr / 5), smallest_address_size(n)))
            read_mlp_size = size_or_default(read_mlp_size, max(1, dh // 4))
            check_positive(address_size=address_size, read_mlp_size=read_mlp_size)
            self.register_buffer(
                "address", sparse_addresses(n, address_size, default_nonzeros(address_size), address_seed)
            )
            self.tardis = TardisAddressing(input_size, dh, address_size + dr, n, read_mlp_size)
        self._initialise()

    def _initialise(self) -> None:
        """Appendix C: "all weight matrices in RNNs are initialized to orthogonal matrices" and
        the forget-gate bias to 1. W_ig, W_go and W_s are orthogonal over their whole input
        [x_t, h_{t-1}(, r_t)] (one block of rows per gate: d_h rows, the d_r rows of g^r and
        o^r, the n_mem rows of W_s), then split into the x part (input_proj) and the h and r
        parts; the write map too."""
        dh, dr, n = self.hidden_size, self.width, self.slots
        C, G = dh + dr, 4 * dh + dr
        x = self.input_proj.weight
        blocks = [
            ([x[:C], self.control_h.weight[:C], self.control_r.weight], dh),  # W_ig
            ([x[C : C + G], self.gates_h.weight, self.gates_r.weight], dh),  # W_go
            ([x[C + G : C + G + n], self.control_h.weight[C:]], n),
        ]  # W_s
        if self.write_address_h is not None:
            blocks.append(([x[C + G + n :], self.write_address_h.weight], n))
        for parts, rows in blocks:
            full = torch.cat([p.detach() for p in parts], dim=1)
            _orthogonal_blocks(full, rows)
            with torch.no_grad():
                start = 0
                for part in parts:
                    part.copy_(full[:, start : start + part.shape[1]])
                    start += part.shape[1]
        if self.write_map is not None:
            _orthogonal_blocks(self.write_map.weight, dr)
        with torch.no_grad():
            bias = self.input_proj.bias
            bias.zero_()
            forget = slice(dh + dr + dh, dh + dr + 2 * dh)  # f block of eq. 6
            if self.ln_gates is not None:
                self.ln_gates.bias[dh : 2 * dh].fill_(1.0)
            else:
                bias[forget].fill_(1.0)

    # ------------------------------------------------------------------ state

    def initial_state(self, batch_size: int, device=None, dtype=None) -> ARMINState:
        ref = self.h0
        device = ref.device if device is None else device
        dtype = ref.dtype if dtype is None else dtype
        zeros = torch.zeros((), device=device, dtype=dtype).expand(batch_size, self.slots)
        return ARMINState(
            batched(self.h0, batch_size, device, dtype),
            batched(self.initial_memory, batch_size, device, dtype),
            zeros,
            zeros,
            torch.zeros(batch_size, dtype=torch.long, device=device),
        )

    def precompute(self, x: torch.Tensor) -> torch.Tensor:
        """The input's share of eqs. 3, 6, 9 (and the independent write head) for all steps,
        plus W_x^γ x + b of TARDIS addressing: (B, T, I) -> (B, T, P)."""
        parts = [self.input_proj(x)]
        if self.tardis is not None:
            parts.append(self.tardis.precompute(x))
        return torch.cat(parts, dim=-1)

    # ----------------------------------------------------------- addressing

    def discrete_eval(self) -> bool:
        """Whether this pass takes the argmax (evaluation, or addressing="argmax")."""
        return self.addressing == "argmax" or (not self.training and self.addressing != "soft")

    def _weights(self, logits: torch.Tensor) -> torch.Tensor:
        """Read (or independent write) weights from logits (B, n): eq. 9 or an ablation."""
        if self.addressing == "soft":
            return torch.softmax(logits, -1)
        if self.discrete_eval():
            return sampling.argmax_one_hot(logits)
        return sampling.gumbel_softmax(logits, self.inverse_temperature, hard=self.addressing == "gumbel")

    def _read_logits(self, x_s, x_t, h, h_s, memory, counts, last_read) -> torch.Tensor:
        """Read logits (B, n): W_s [x_t, h_{t-1}] + b_s (eq. 9) from its x part x_s and h part
        h_s, or the TARDIS MLP (eq. 21)."""
        if self.tardis is not None:
            keyed = torch.cat([self.address.to(memory.dtype).expand(memory.shape[0], -1, -1), memory], dim=-1)
            return self.tardis.logits(x_t, h, keyed, counts, last_read)  # eq. 21
        return x_s + h_s  # eq. 9

    def _random_read(self, like: torch.Tensor) -> torch.Tensor:
        index = torch.randint(0, self.slots, (like.shape[0], 1), device=like.device)
        return torch.zeros_like(like).scatter_(-1, index, 1.0)

    # ----------------------------------------------------------------- cell

    def cell_update(self, x_control, x_gates, h, h_control, r):
        """Eqs. 3-8: (h_t before zoneout, o_t, [g^h; g^r], gate activations); h_control is
        W_ig's h part times h_{t-1}."""
        dh, dr = self.hidden_size, self.width
        if self.control_gates:
            pre = x_control + h_control + self.control_r(r)
            control = torch.sigmoid(self.ln_control(pre) if self.layer_norm else pre)  # eq. 3
            h_g, r_g = control[:, :dh] * h, control[:, dh:] * r  # eqs. 4-5
        else:
            control = h.new_ones(h.shape[0], dh + dr)
            h_g, r_g = h, r
        pre = x_gates + self.gates_h(h_g) + self.gates_r(r_g)
        pre = self.ln_gates(pre) if self.layer_norm else pre  # eq. 6
        sig = torch.sigmoid(pre)  # i, f, o^h, o^r (the g block is unused)
        i, f, o = sig[:, :dh], sig[:, dh : 2 * dh], sig[:, 3 * dh :]
        g = torch.tanh(pre[:, 2 * dh : 3 * dh])
        h_new = torch.addcmul(f * h, i, g)  # eq. 7
        h_new = self.ln_hidden(h_new) if self.layer_norm else h_new
        out = o * torch.tanh(torch.cat([h_new, r], dim=-1))  # eq. 8
        return h_new, out, control, (sig, g)

    def _zoneout(self, h_prev: torch.Tensor, h_new: torch.Tensor) -> torch.Tensor:
        """Zoneout (Krueger et al. 2016): keep each unit of h_{t-1} with probability p while
        training; the expectation p h_{t-1} + (1 - p) h_t at evaluation."""
        p = self.zoneout
        if not p:
            return h_new
        if self.training:
            keep = torch.rand_like(h_new) < p
            return torch.where(keep, h_prev, h_new)
        return p * h_prev + (1 - p) * h_new

    def step(self, inputs: torch.Tensor, state: ARMINState, with_trace: bool = False):
        h, memory, counts, last_read, steps = state
        x_control, x_gates, x_s, x_w, *rest = inputs.split(
            self.sizes + ([inputs.shape[-1] - sum(self.sizes)] if self.tardis is not None else []), dim=-1
        )
        x_t = rest[0] if rest else None
        fast = self.fast_inference and self.discrete_eval() and not with_trace
        h_side = self.control_h(h)  # [W_ig,h h_{t-1} | W_s,h h_{t-1}]
        h_control, h_s = h_side[:, : self.hidden_size + self.width], h_side[:, -self.slots :]
        read_w: Optional[torch.Tensor]  # None on the fast path (no weighting made)
        if self.read_mode == "random":
            logits = h.new_zeros(h.shape[0], self.slots)
            read_w = self._random_read(logits)
        else:
            logits = self._read_logits(x_s, x_t, h, h_s, memory, counts, last_read)
            read_w = None if fast else self._weights(logits)
        batch = torch.arange(h.shape[0], device=h.device)
        if fast:  # section 5: argmax and an index gather instead of the weighted sum
            read_index = read_w.argmax(-1) if read_w is not None else logits.argmax(-1)
            r = memory[batch, read_index]
        else:
            assert read_w is not None
            r = (read_w.unsqueeze(1) @ memory).squeeze(1)  # eq. 10
        h_new, out, control, gates = self.cell_update(x_control, x_gates, h, h_control, r)
        h_new = self._zoneout(h, h_new)
        value = self.write_map(h_new) if self.write_map is not None else h_new  # section 3.3
        if fast:
            write_index = self._write_index(read_index, steps, x_w, h_new)
            memory = memory.index_put((batch, write_index), value.to(memory.dtype))
            if self.tardis is not None:
                read_w = torch.zeros_like(counts).scatter_(-1, read_index.unsqueeze(-1), 1.0)
        else:
            write_w = self._write_weights(read_w, steps, x_w, h_new)
            memory = write_rows(memory, write_w, value)
        if self.tardis is not None:  # usage counts and the last read: TARDIS addressing only
            assert read_w is not None  # the fast path scattered its index into one
            hard = read_w.detach()
            counts, last_read = counts + hard, hard
        state = ARMINState(h_new, memory, counts, last_read, steps + 1)
        trace = None
        if with_trace:
            sig, g = gates
            dh = self.hidden_size
            gates = torch.cat([sig[:, : 2 * dh], g, sig[:, 3 * dh :]], dim=-1)
            assert read_w is not None  # no fast path with the trace
            trace = ARMINTrace(
                read_w.unsqueeze(1), write_w.unsqueeze(1), logits.unsqueeze(1), r, control, gates, h_new
            )
        return out, state, trace

    # ------------------------------------------------------ the whole-sequence op

    op = armin_op

    def op_options(self, with_trace: bool, backward: bool) -> Optional[ARMINOptions]:
        """The op's options; None outside the paper's configuration (auto read, tied write,
        control gates, layer norm), which is all the op expresses."""
        papers = self.read_mode == "auto" and self.write_mode == "tied" and self.control_gates
        if not (papers and self.layer_norm and self.ln_gates is not None):
            return None
        if self.addressing == "soft":
            mode = "soft"
        elif self.discrete_eval():
            mode = "argmax"
        else:
            mode = self.addressing
        return ARMINOptions(
            mode=mode,
            inverse_temperature=float(self.inverse_temperature),
            eps=self.ln_gates.eps,
            backward=backward,
            trace=with_trace,
        )

    def op_weights(self) -> ARMINWeights:
        ln_control, ln_gates, ln_hidden = self.ln_control, self.ln_gates, self.ln_hidden
        assert ln_control is not None and ln_gates is not None and ln_hidden is not None  # op_options
        return ARMINWeights(
            control_h=self.control_h.weight,
            control_r=self.control_r.weight,
            gates_h=self.gates_h.weight,
            gates_r=self.gates_r.weight,
            write_map=None if self.write_map is None else self.write_map.weight,
            ln_control_weight=ln_control.weight,
            ln_control_bias=ln_control.bias,
            ln_gates_weight=ln_gates.weight,
            ln_gates_bias=ln_gates.bias,
            ln_hidden_weight=ln_hidden.weight,
            ln_hidden_bias=ln_hidden.bias,
        )

    def run_op(
        self, x: torch.Tensor, state: ARMINState, options: ARMINOptions, weights: ARMINWeights, backend: str
    ):
        """All steps of x (B, T, I) through mannlab.ops.armin.armin_sequence on ``backend``, with
        the Gumbel noise and zoneout masks drawn as the step loop draws them."""
        noise, zone = self._fused_draws(x, options.mode)
        inputs = ARMINInputs(self.precompute(x), noise, zone)
        return armin_sequence(inputs, state, weights, options, backend)

    def _fused_draws(
        self, x: torch.Tensor, mode: str
    ) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """The Gumbel noise (T, B, n) and zoneout weights (T, B, d_h) of a fused pass, drawn in
        the step loop's order (per step: the read's noise, then the zoneout mask), so every
        path gives the same sample for a seed; None for no noise, None for no zoneout. One
        draw for all steps where that gives the same numbers (CPU noise alone); step by step
        where the draws interleave or on a GPU (whose generator's stream depends on how the
        draws are split)."""
        B, T = x.shape[:2]
        gumbel = mode in ("gumbel", "gumbel-relaxed")
        masks = bool(self.zoneout) and self.training
        zone = None
        if self.zoneout and not self.training:  # the expectation
            zone = x.new_full((T, B, self.hidden_size), self.zoneout)
        if not masks and (not gumbel or x.device.type == "cpu"):
            return (sampling.gumbel_noise(x.new_empty(T, B, self.slots)) if gumbel else None), zone
        noise, zones = [], []
        for _ in range(T):
            if gumbel:
                noise.append(sampling.gumbel_noise(x.new_empty(B, self.slots)))
            if masks:
                keep = torch.rand(B, self.hidden_size, dtype=x.dtype, device=x.device) < self.zoneout
                zones.append(keep.to(x.dtype))
        return (torch.stack(noise) if gumbel else None), (torch.stack(zones) if masks else zone)

    def _write_weights(self, read_w, steps, x_w, h_new) -> torch.Tensor:
        """The slot written (B, n): the next empty slot while filling, then by ``write``."""
        fill, filling = sequential_slots(steps, self.slots, read_w.dtype)
        if self.write_mode == "queue":
            return sequential_slots(steps % self.slots, self.slots, read_w.dtype)[0]
        if self.write_mode == "independent":
            assert self.write_address_h is not None  # made for write="independent"
            chosen = self._weights(x_w + self.write_address_h(h_new))  # over [x_t, h_t]
        else:
            chosen = read_w
        return torch.where(filling, fill, chosen)

    def _write_index(self, read_index, steps, x_w, h_new) -> torch.Tensor:
        """The fast path's slot index (B,), the argmax version of :meth:`_write_weights`."""
        if self.write_mode == "queue":
            return steps % self.slots
        if self.write_mode == "independent":
            assert self.write_address_h is not None  # made for write="independent"
            chosen = (x_w + self.write_address_h(h_new)).argmax(-1)
        else:
            chosen = read_index
        return torch.where(steps < self.slots, steps, chosen)


class ARMIN(CellTemperature, SequenceModel):
    """ARMIN (auto-addressing memory, ICLR 2019 submission), shaped like torch.nn.LSTM.

    ``y, state = model(x)`` runs a whole sequence; the memory starts from its learned
    initial value M_0 at every call unless a ``state`` is passed in. Evaluation reads
    the argmax (except ``addressing="soft"``) through the fast inference path of
    section 5. 1/τ is 1 at the start and grows by 1 every ``temperature_every``
    training steps up to n_mem - 1, set by ``mannlab.training.schedules`` (appendix C).

    Shapes (B batch, T steps; with ``batch_first=False`` x and y are (T, B, ...)):

    - x: (B, T, input_size)
    - y: logits (B, T, output_size) from o_t (eq. 8); with ``output_size=None`` o_t
      itself, (B, T, hidden_size + memory_width)
    - state: :class:`ARMINState`: h (B, d_h); memory M (B, n_mem, d_r); read counts and
      last read (B, n_mem), for TARDIS addressing; steps since M was empty (B,)

    Args:
        input_size (int): features per step of x.
        output_size (int | None): logits per step of y, from a linear layer on o_t;
            None returns o_t itself. Default: None.
        hidden_size (int): d_h, the recurrent cell's units. Default: 100 (table 5).
        memory_slots (int): n_mem, the memory's slots (past hidden states).
            Default: 50.
        memory_width (int | None): d_r, a slot's width; None: hidden_size (a linear
            map writes h_t when they differ). Default: None.
        addressing (str): "gumbel" (eq. 9, straight-through), "gumbel-relaxed" (the
            relaxed sample as the read and write weights), "soft" (plain softmax reads
            and writes, table 7's smooth read/write; what the authors' code runs) or
            "argmax". Default: "gumbel".
        read (str): "auto" (auto-addressing, eq. 9), "random" (a uniformly random slot,
            a table-7 ablation) or "tardis" (TARDIS's read MLP, appendix B.2).
            Default: "auto".
        write (str): "tied" (into the next empty slot, then the slot just read),
            "queue" (slot n mod n_mem) or "independent" (a second auto-addressing head
            picks the slot). Default: "tied".
        control_gates (bool): the control gates of eqs. 3-5; False feeds [x_t, h_{t-1},
            r_t] ungated (a table-7 ablation). Default: True.
        layer_norm (bool): layer norm on eqs. 3, 6 and 7 (appendix C). Default: True.
        zoneout (float): probability p of keeping a unit of h_{t-1} (its expectation at
            evaluation). Default: 0.0.
        temperature_every (int): training steps per increase of 1/τ (0 keeps it at 1).
            Default: 200.
        address_size (int | None): with ``read="tardis"`` only: the width of the fixed
            random addresses; None: memory_width / 5 (rounded), or more when that gives too few
            different rows for n_mem slots. Default: None.
        read_mlp_size (int | None): with ``read="tardis"`` only: width of the read MLP's
            hidden layer; None: hidden_size // 4. Default: None.
        address_seed (int): with ``read="tardis"`` only: the seed of the random
            addresses. Default: 0.
        batch_first (bool): True: x and y are (B, T, features); False: (T, B, features).
            Default: True.
    """

    cell: ARMINCell

    def __init__(
        self,
        input_size: int,
        output_size: Optional[int] = None,
        hidden_size: int = 100,
        memory_slots: int = 50,
        memory_width: Optional[int] = None,
        addressing: str = "gumbel",
        read: str = "auto",
        write: str = "tied",
        control_gates: bool = True,
        layer_norm: bool = True,
        zoneout: float = 0.0,
        temperature_every: int = 200,
        address_size: Optional[int] = None,
        read_mlp_size: Optional[int] = None,
        address_seed: int = 0,
        batch_first: bool = True,
    ):
        check_model_size("ARMIN", locals())  # refuse sizes that cannot fit, before building
        cell = ARMINCell(
            input_size,
            hidden_size,
            memory_slots,
            memory_width,
            addressing,
            read,
            write,
            control_gates,
            layer_norm,
            zoneout,
            address_size,
            read_mlp_size,
            address_seed,
        )
        super().__init__(input_size, output_size, cell.features, batch_first)
        self.cell = cell
        if (
            isinstance(temperature_every, bool)
            or not isinstance(temperature_every, int)
            or temperature_every < 0
        ):
            raise ConfigError(
                f"temperature_every must be an integer >= 0 (0: 1/τ stays 1), got {temperature_every!r}"
            )
        self.temperature_every = temperature_every

    @property
    def temperature_schedule(self):
        """(every, maximum = n_mem - 1) of 1/τ for begin_step, or None."""
        if not self.temperature_every or self.cell.addressing not in ("gumbel", "gumbel-relaxed"):
            return None
        return self.temperature_every, max(1, self.cell.slots - 1)

    def _run(self, x: torch.Tensor, state: Any, with_trace: bool):
        """The op on the backend dispatch chooses where it covers the pass, else the step loop."""
        return run_sequence(self.cell, x, state, with_trace)
