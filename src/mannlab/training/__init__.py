"""Training: one loop (loop.py) around two batch sources, sampled batches (sampled.py) and
carried-state TBPTT segments (tbptt.py)."""

from mannlab.training.loop import train
from mannlab.training.optimizer import make_optimizer
from mannlab.training.prepared import PreparedRun, prepare_run
from mannlab.training.schedules import start_minibatch
from mannlab.training.tbptt import segment_loss
from mannlab.training.update import DivergedError, NonFiniteLossError, model_aux_loss, sequence_loss

# train, and the pieces of its step a loop of your own needs (README, "Your own training loop")
__all__ = [
    "train",
    "prepare_run",
    "PreparedRun",
    "make_optimizer",
    "DivergedError",
    "NonFiniteLossError",
    "start_minibatch",
    "sequence_loss",
    "segment_loss",
    "model_aux_loss",
]
