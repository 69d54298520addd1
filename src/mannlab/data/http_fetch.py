"""Fetching one URL into a file: a progress bar, retries that resume, a total deadline and a
minimum rate.

A socket timeout alone bounds each read, not the download: a server (or proxy) that sends a
byte every few seconds would keep it going for ever. So the whole download, retries
included, must end by ``deadline_s``, and every ``window_s`` seconds at least ``min_rate``
bytes per second must have arrived; either failing ends it with a ``FetchError`` that says
what happened. Connection errors, timeouts and server errors (5xx) are retried, continuing
from the bytes already received where the server honours a Range request; a stall, the
deadline or a 4xx answer are not (trying again at once would not help).

The limits come from ``FetchLimits()``; ``$MANNLAB_DOWNLOAD_DEADLINE`` (seconds) and
``$MANNLAB_DOWNLOAD_MIN_RATE`` (bytes per second, 0 for none) change the defaults, for a
slow link.
"""

from __future__ import annotations

import http.client
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

#: bytes asked for per read; reads return as soon as some bytes arrive (read1)
BLOCK = 1 << 16


def _env_float(name: str, default: float) -> float:
    """``$name`` as a non-negative number, else ``default`` (a bad value is ignored)."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value >= 0 else default


@dataclass(frozen=True)
class FetchLimits:
    """How long and how slowly a download may run before it is given up."""

    deadline_s: float = field(default_factory=lambda: _env_float("MANNLAB_DOWNLOAD_DEADLINE", 7200.0))
    min_rate: float = field(default_factory=lambda: _env_float("MANNLAB_DOWNLOAD_MIN_RATE", 4096.0))
    window_s: float = 60.0
    read_timeout_s: float = 30.0
    attempts: int = 4
    backoff_s: float = 2.0
    #: the most bytes accepted from a server that names no size (a guard, not a data set's size)
    max_bytes: int = 4 << 30


class FetchError(Exception):
    """A download that was given up, with the reason as its message."""


def human_bytes(count: float) -> str:
    """``count`` bytes in a unit a person reads at a glance: "94.6 MB"."""
    for unit in ("bytes", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:,.0f} {unit}" if unit == "bytes" else f"{count:,.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


class RateGuard:
    """Ends a download that passes its deadline or falls below the minimum rate."""

    def __init__(self, limits: FetchLimits, deadline: float):
        self.limits, self.deadline = limits, deadline
        self.window_start, self.window_bytes = time.monotonic(), 0

    def add(self, count: int) -> None:
        now = time.monotonic()
        self.window_bytes += count
        if now > self.deadline:
            raise FetchError(
                f"not finished within the deadline of {self.limits.deadline_s:,.0f} s "
                f"(set $MANNLAB_DOWNLOAD_DEADLINE to allow longer)"
            )
        elapsed = now - self.window_start
        if elapsed >= self.limits.window_s:
            if self.window_bytes < self.limits.min_rate * elapsed:
                raise FetchError(
                    f"stalled: {self.window_bytes:,} bytes in the last {elapsed:,.0f} s, below the "
                    f"minimum of {self.limits.min_rate:,.0f} bytes/s (set $MANNLAB_DOWNLOAD_MIN_RATE "
                    f"lower for a slow link, 0 to wait regardless)"
                )
            self.window_start, self.window_bytes = now, 0


def fetch_url(url: str, path: Path, limits: FetchLimits | None = None) -> None:
    """Write the bytes at ``url`` to ``path``, with a progress bar on a terminal.

    Raises FetchError when given up (stalled, past the deadline, too large, a 4xx answer),
    or the last OSError / HTTPException when every attempt failed.
    """
    limits = limits or FetchLimits()
    deadline = time.monotonic() + limits.deadline_s
    for attempt in range(1, limits.attempts + 1):
        try:
            _fetch_once(url, path, limits, deadline)
            return
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code not in (408, 429):
                raise FetchError(f"the server answered HTTP {exc.code} {exc.reason}") from None
            failure: Exception = exc
        except (OSError, http.client.HTTPException) as exc:
            failure = exc
        wait = limits.backoff_s * 2 ** (attempt - 1)
        if attempt == limits.attempts or time.monotonic() + wait > deadline:
            raise failure
        print(f"mannlab: download interrupted ({failure}); retrying in {wait:.0f} s", file=sys.stderr)
        time.sleep(wait)


def _fetch_once(url: str, path: Path, limits: FetchLimits, deadline: float) -> None:
    """One attempt, continuing after the bytes already in ``path`` where the server allows."""
    have = path.stat().st_size if path.exists() else 0
    headers = {"User-Agent": "mannlab"}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=limits.read_timeout_s) as response:
        if have and getattr(response, "status", None) != 206:
            have = 0  # the server sends the whole file again
        length = response.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        read = getattr(response, "read1", response.read)
        guard = RateGuard(limits, deadline)
        with (
            open(path, "ab" if have else "wb") as out,
            tqdm(
                total=total,
                initial=have,
                desc=url.rstrip("/").rsplit("/", 1)[-1],
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                leave=False,
                disable=None,  # off when stderr is not a terminal
                file=sys.stderr,
            ) as bar,
        ):
            while block := read(BLOCK):
                out.write(block)
                have += len(block)
                if have > limits.max_bytes:
                    raise FetchError(f"more than {human_bytes(limits.max_bytes)} sent; refused")
                bar.update(len(block))
                guard.add(len(block))
    if total is not None and have < total:  # read1 does not raise IncompleteRead at a cut
        raise ConnectionError(f"the connection closed after {have:,} of {total:,} bytes")
