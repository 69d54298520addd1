"""Ctrl-C while a compiled kernel runs is an interruption, not an internal error.

SIGINT that arrives while a numba kernel runs sets Python's KeyboardInterrupt inside the
kernel's call, and the call then returns a result with that exception pending: Python reports
``SystemError: CPUDispatcher(<function ...>) returned a result with an exception set``, the
KeyboardInterrupt as its cause. Whoever catches KeyboardInterrupt (the training, the CLI)
recognises that SystemError as the interruption it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt, or a SystemError raised because one arrived
    during a compiled call (KeyboardInterrupt among its causes or contexts)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if not isinstance(exc, SystemError):
        return False
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


@contextmanager
def interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """Raise a KeyboardInterrupt in place of a SystemError that one caused inside the block."""
    try:
        yield
    except SystemError as exc:
        if caused_by_interrupt(exc):
            raise KeyboardInterrupt from None
        raise
