"""A process group for ranks that share one machine's memory: DDP's all-reduces (the gradient
buckets and the map of used parameters) are sums through a shared-memory file; every other
collective goes to the gloo group underneath.

Why: on a CPU node a gloo all-reduce goes through loopback TCP and gloo's threads. For ARMIN's
161,000 gradients it took 2-4 ms of a 25 ms step, and with find_unused_parameters DDP adds
a second one (the used map), each a point where the ranks wait; through shared memory each
is a copy, a wait for the other ranks' copies and a sum.

The sum is the same on every rank, bit for bit: each rank adds the ranks' slots in rank
order (so the ranks' parameters stay equal). It is used only where it is known to be
correct (``local_group``): a CPU device, x86-64 (whose stores become visible to other cores
in program order, which the flag protocol below relies on), and every rank seeing the same
file in /dev/shm (a token written by rank 0 and read back by all: the proof that the ranks
share memory); ``MANNLAB_DDP_SHM=0`` turns it off. Otherwise DDP uses the gloo group.

Protocol: each rank has a slot in each of two sets; for its g-th all-reduce a rank copies
its tensor into its slot of set g % 2 and its size beside it, then stores g in its flag,
waits until every flag is at least g, then sums the slots. A rank reuses set g % 2 at
g + 2 only after every flag has reached g + 1, i.e. after every rank has finished reading
the set at g. Ranks whose sizes differ at the same g have called their collectives in
another order: an error, not a sum. The loop's reported losses are summed here too, after
the backward (distributed.mean_over_ranks_later).
"""

from __future__ import annotations

import os
import platform
import secrets
import time
from typing import Any

import torch
import torch.distributed as dist

SHM_DIR = "/dev/shm"
TOKEN_BYTES = 64  # the file starts with rank 0's token (see local_group), then the flags
SLOT_BYTES = 4 << 20  # larger tensors are reduced in chunks of this size
FLAG_STRIDE = 16  # int64s between two ranks' flags: one cache line each
SPIN_SECONDS = 0.002  # yield-spin this long, then sleep between looks (waits are short)
_SUMMABLE = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32)


def enabled(device: torch.device) -> bool:
    """Whether this process may use shared memory for DDP (the local conditions; the
    ranks' agreement that they share a machine is checked by ``local_group``)."""
    return (
        device.type == "cpu"
        and os.environ.get("MANNLAB_DDP_SHM", "1") != "0"
        and platform.machine().lower() in ("x86_64", "amd64")
        and os.path.isdir(SHM_DIR)
    )


class _Done(dist.Work):
    """A finished collective (the sums are computed synchronously)."""

    def __init__(self, result: list[torch.Tensor]):
        super().__init__()
        self._future: torch.futures.Future = torch.futures.Future()
        self._future.set_result(result)

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future


class SharedMemoryGroup(dist.ProcessGroup):
    """All-reduce (sum) of contiguous CPU tensors through shared memory; every other call to
    ``inner`` (the gloo group). Build it with ``local_group``."""

    def __init__(self, inner: dist.ProcessGroup, path: str, timeout: float):
        super().__init__(inner.rank(), inner.size())
        self.inner, self.path, self.timeout = inner, path, timeout
        world = inner.size()
        header = TOKEN_BYTES + FLAG_STRIDE * world * 8
        # grows the file to its size with zeros: every flag starts at 0
        memory = torch.from_file(path, shared=True, size=header + 2 * world * SLOT_BYTES, dtype=torch.uint8)
        lines = memory[TOKEN_BYTES:header].view(torch.int64).view(world, FLAG_STRIDE)
        self._flags, self._sizes = lines[:, 0], lines[:, 1:3]  # a size per rank and set
        self._slots = memory[header:].view(2, world, SLOT_BYTES)
        self._count = 0

    # the collectives DDP calls
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        op = getattr(opts, "reduceOp", dist.ReduceOp.SUM)
        if op != dist.ReduceOp.SUM or not all(self._summable(t) for t in tensors):
            return self.inner.allreduce(tensors, opts) if opts is not None else self.inner.allreduce(tensors)
        for tensor in tensors:
            flat = tensor.view(-1)
            step = SLOT_BYTES // tensor.element_size()
            for start in range(0, flat.numel(), step):
                self._sum(flat[start : start + step])
        return _Done(tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        return self.inner.broadcast(tensors, opts) if opts is not None else self.inner.broadcast(tensors)

    def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> dist.Work:
        return self.inner.allgather(outputs, inputs)

    def barrier(self, opts: Any = None) -> dist.Work:
        return self.inner.barrier()

    def getBackendName(self) -> str:  # noqa: N802 - the name torch calls
        return "mannlab-shm"

    @staticmethod
    def _summable(tensor: torch.Tensor) -> bool:
        return tensor.device.type == "cpu" and tensor.dtype in _SUMMABLE and tensor.is_contiguous()

    def _sum(self, part: torch.Tensor) -> None:
        """``part`` <- the sum over the ranks of their ``part`` (in rank order)."""
        self._count += 1
        count, nbytes = self._count, part.numel() * part.element_size()
        slots = self._slots[count % 2, :, :nbytes]
        slots[self.rank()].view(part.dtype).copy_(part)
        sizes = self._sizes[:, count % 2]
        sizes[self.rank()] = nbytes
        self._flags[self.rank()] = count  # last: the slot and size are visible before it
        self._wait(count)
        if not bool((sizes == nbytes).all()):  # the ranks' collectives out of step
            raise RuntimeError(
                f"rank {self.rank()}: all-reduce {count} of {nbytes} bytes met sizes "
                f"{sizes.tolist()} on the other ranks (collectives called in another order)"
            )
        part.copy_(slots[0].view(part.dtype))
        for other in range(1, self.size()):
            part.add_(slots[other].view(part.dtype))

    def _wait(self, count: int) -> None:
        """Until every rank has stored ``count`` in its flag."""
        flags, start, looks = self._flags, time.monotonic(), 0
        while int(flags.min()) < count:
            looks += 1
            if looks % 64:
                os.sched_yield()
                continue
            waited = time.monotonic() - start
            if waited > self.timeout:
                raise RuntimeError(
                    f"rank {self.rank()}: the other ranks did not reach all-reduce {count} "
                    f"within {self.timeout:.0f} s (a rank has failed or hangs)"
                )
            if waited > SPIN_SECONDS:
                time.sleep(1e-4)


def local_group(device: torch.device, timeout: float) -> SharedMemoryGroup | None:
    """The shared-memory group over the default group's ranks, or None where it cannot be
    used (then DDP keeps gloo). Collective: every rank must call it."""
    inner = dist.group.WORLD
    ok = enabled(device)
    # rank 0 names the file (the name is shared through gloo); a rank that cannot use it says so
    path = [os.path.join(SHM_DIR, f"mannlab-ddp-{secrets.token_hex(8)}") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(path, src=0)
    token = [secrets.token_bytes(16) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(token, src=0)
    group = None
    try:
        if dist.get_rank() == 0 and ok:
            with open(path[0], "wb") as f:
                f.write(token[0])
        dist.barrier()
        if ok:
            with open(path[0], "rb") as f:
                ok = f.read(len(token[0])) == token[0]  # the same memory, not merely the same name
    except OSError:
        ok = False
    flags = [None] * dist.get_world_size()
    dist.all_gather_object(flags, ok)
    try:
        if all(flags):
            group = SharedMemoryGroup(inner, path[0], timeout)  # maps the file, grown to size
        dist.barrier()  # every rank has mapped it
    finally:
        if dist.get_rank() == 0 and os.path.exists(path[0]):
            os.unlink(path[0])  # the mappings stay; nothing is left behind, even after a crash
    return group
