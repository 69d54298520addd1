"""A trained model from its files, built and with its weights: a run directory's checkpoint
(``load_run``, ``mannlab.load``) or a directory ``mannlab.save`` wrote. The files themselves
are rundir/'s; building a model from a config is building.py's."""

from mannlab.loading.runs import load, load_run, use_run_threads
from mannlab.loading.saved import build_described, describe, load_saved, save

__all__ = ["load", "load_run", "use_run_threads", "save", "load_saved", "describe", "build_described"]
