"""The training progress bar, shown from the end of a session's first step.

The first step of a process may compile the kernels (tens of seconds, announced on stderr
by mannlab.ops), so a rate measured from the start would show an ETA many times the real
one; a bar opened after that warm-up step measures only the steps that follow.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm


class WarmupBar:
    """A tqdm bar (same arguments) that opens at its first ``update``, counting that update
    as already done, so its rate and ETA start after the warm-up step."""

    def __init__(self, **options: Any):
        if not options.get("disable") and "ipykernel" not in sys.modules:
            options["disable"] = None  # tqdm's "auto": no bar when stderr is not a terminal (a log file)
        self._options = options
        self._bar: tqdm | None = None
        self._postfix: dict[str, Any] | None = None

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)
            return
        options = dict(self._options)
        options["initial"] = options.get("initial", 0) + n
        self._bar = tqdm(**options)
        if self._postfix is not None:
            self._bar.set_postfix(self._postfix, refresh=False)

    def set_postfix(self, postfix: dict[str, Any], refresh: bool = True) -> None:
        if self._bar is None:
            self._postfix = postfix
        else:
            self._bar.set_postfix(postfix, refresh=refresh)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
