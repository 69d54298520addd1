"""Training time that survives a resume: wall and CPU seconds summed over all sessions.

CPU seconds (of the training process, every thread) are kept beside wall seconds because
on a shared machine wall time mostly measures the other jobs.
"""

from __future__ import annotations

import time


class SessionClock:
    """Seconds spent so far: those of earlier sessions plus this one's since construction."""

    def __init__(self, wall_before: float = 0.0, cpu_before: float = 0.0):
        self._wall_before, self._cpu_before = wall_before, cpu_before
        self._wall_start, self._cpu_start = time.perf_counter(), time.process_time()

    def wall(self) -> float:
        return self._wall_before + time.perf_counter() - self._wall_start

    def cpu(self) -> float:
        return self._cpu_before + time.process_time() - self._cpu_start

    def seconds(self, which: str) -> float:
        """Seconds on the named clock: "wall" or "cpu" (train.budget_clock)."""
        return self.cpu() if which == "cpu" else self.wall()

    def out_of_time(self, max_minutes: float, which: str) -> bool:
        """Has the budget of ``max_minutes`` (0: none) on clock ``which`` been spent?"""
        return bool(max_minutes) and self.seconds(which) >= 60 * max_minutes

    def budget_text(self, max_minutes: float, which: str) -> str:
        """Minutes spent of the budget, for a progress bar: "12.3/30"."""
        return f"{self.seconds(which) / 60:.1f}/{max_minutes:g}"
