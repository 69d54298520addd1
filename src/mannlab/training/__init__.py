"""Training: one loop (loop.py) around two batch sources, sampled batches (sampled.py) and
carried-state TBPTT segments (tbptt.py)."""
from mannlab.training.loop import train
from mannlab.training.optimizer import make_optimizer
from mannlab.training.update import DivergedError, NonFiniteLossError

__all__ = ["train", "make_optimizer", "DivergedError", "NonFiniteLossError"]
