"""The papers' analyses as tools.

    wormhole   section 6 of the TARDIS paper: wormhole path lengths of untrained
               MANNs with uniformly random heads (eq. 40, figures 3-5); numpy only
    gradflow   section 5: norm of the Jacobian of the output at t1 with respect to
               the input at t0 against the distance t1 - t0, for any model

Computation only: their figures and CSV files are mannlab.reporting's.
"""

import importlib

from mannlab.analysis.wormhole import (
    SCHEMES,
    UNWRITTEN,
    HeadRun,
    LengthCurves,
    length_curves,
    path_sweep,
    shortest_paths,
    simulate,
)

__all__ = [
    "SCHEMES",
    "UNWRITTEN",
    "HeadRun",
    "LengthCurves",
    "simulate",
    "shortest_paths",
    "length_curves",
    "path_sweep",
    "gradflow",
    "wormhole",
]


def __getattr__(name):
    # gradflow needs torch: import it on first use only.
    if name == "gradflow":
        return importlib.import_module(f"mannlab.analysis.{name}")
    raise AttributeError(f"module 'mannlab.analysis' has no attribute {name!r}")
