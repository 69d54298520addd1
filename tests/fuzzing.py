"""What the fuzz corpora share: their hypothesis settings, the byte corruptions, a guard
against hangs and the listing of files a case may not add to.

MANNLAB_FUZZ_EXAMPLES sets the cases per target (each file has its CI default); when it is
set, new cases are drawn on every run, else the cases are derandomized so CI is reproducible.
"""

import contextlib
import os
import signal
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

HANG_SECONDS = 30


def examples(default: int) -> int:
    """Cases per target: MANNLAB_FUZZ_EXAMPLES, else this file's CI default."""
    return int(os.environ.get("MANNLAB_FUZZ_EXAMPLES", str(default)))


def fuzz_settings(default: int, seconds: float = 5) -> settings:
    """Hypothesis settings of a fuzz target: ``examples(default)`` cases, derandomized in CI."""
    return settings(
        max_examples=examples(default),
        deadline=timedelta(seconds=seconds),
        database=None,
        derandomize="MANNLAB_FUZZ_EXAMPLES" not in os.environ,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


TOKENS = [
    b"\x00",
    b"\xff",
    b"\x80",
    b"\xc3",
    b"\t",
    b"\n",
    b"\r",
    b" ",
    b"?",
    b"-",
    b"-1",
    b"1e999",
    b"nan",
    b"inf",
    b"9" * 20,
    b"9" * 5000,
    b"[" * 5000,
    b'{"a":' * 3000,
    b"\t\t\t",
    b"1 ",
    b"-" * 100,
]


@st.composite
def corrupt(draw, data: bytes) -> bytes:
    """``data`` with one to three random corruptions (positions biased to the header)."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        n = len(out)
        pos = draw(st.integers(0, min(n, 40)) | st.integers(0, n))
        kind = draw(st.sampled_from(["truncate", "flip", "set", "insert", "delete", "repeat", "token"]))
        if kind == "truncate":
            del out[pos:]
        elif kind == "flip" and pos < n:
            out[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and pos < n:
            out[pos] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]) | st.integers(0, 255))
        elif kind == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del out[pos : pos + draw(st.integers(1, 64))]
        elif kind == "repeat":
            out[pos:pos] = out[pos : pos + draw(st.integers(1, 64))] * draw(st.integers(1, 50))
        elif kind == "token":
            out[pos:pos] = draw(st.sampled_from(TOKENS))
    return bytes(out)


class Hang(BaseException):
    """Not an Exception: no parser's ``except`` can swallow it."""


@contextlib.contextmanager
def no_hang(seconds=HANG_SECONDS):
    def stop(signum, frame):
        raise Hang(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def files_under(root: Path) -> set:
    return {p.relative_to(root) for p in root.rglob("*") if not p.is_dir()}
