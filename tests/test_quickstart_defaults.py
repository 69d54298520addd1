"""The Quick start's training defaults (`mannlab train --model ntm --task copy`).

The clip is what keeps the quick start from collapsing before its solve (docs/RESULTS.md,
Quick start): it must stay near the typical gradient norm of the per-bit loss, not at the
generic 10 that only the largest spikes reach. No training here: the defaults and one
gradient of the untrained model.
"""

import torch

from mannlab.building import build_run
from mannlab.config import DEFAULTS, RunConfig, default_config_dict
from mannlab.ops import use_kernels

QUICK_START_CLIP = 0.1


def test_quick_start_clips_near_the_typical_gradient_norm():
    train = RunConfig.from_dict(default_config_dict("ntm", "copy")).train
    assert train.clip_grad_norm == QUICK_START_CLIP
    # the rest of the documented quick start is unchanged
    assert (train.optimizer, train.lr, train.lr_after_solve) == ("rmsprop", 3e-4, 3e-5)
    assert (train.momentum, train.batch_size, train.val_every) == (0.9, 16, 50)


def test_the_clip_is_specific_to_the_quick_start():
    # other bare `mannlab train` jobs keep TrainConfig's clip (recipes never read DEFAULTS)
    assert "clip_grad_norm" not in DEFAULTS[("*", "*")]["train"]
    assert RunConfig.from_dict(default_config_dict("lstm", "copy")).train.clip_grad_norm == 10.0


def test_untrained_gradient_is_below_the_clip():
    """The clip leaves the plateau at the start alone (its gradients are smaller); later it
    scales most batches a little and the rare spikes a lot, so that no single batch moves
    the weights much further than a typical one."""
    config = RunConfig.from_dict({**default_config_dict("ntm", "copy"), "seed": 0})
    torch.manual_seed(config.seed)
    task, model = build_run(config)
    inputs, targets, mask = task.sample(config.train.batch_size, [config.seed, 0])
    with use_kernels(False):  # the tensor path: no kernel compilation in a test
        logits, _ = model(inputs)
    task.loss(logits, targets, mask).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    assert 0 < norm < QUICK_START_CLIP / 2
