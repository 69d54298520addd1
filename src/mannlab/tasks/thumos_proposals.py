"""THUMOS'14 temporal action proposals (ARMIN section 4.3, table 3; SST, Buch et al. CVPR 2017)
as a proposal task (tasks/proposals.py: windows, labels, weighted loss, epochs).

As SST: the models train on the THUMOS'14 *validation* videos with temporal annotations and
are tested on the *test* videos (the THUMOS'14 training set has trimmed clips only). A
``valid`` split of ``valid_videos`` videos is held out of the validation videos at random
(``split_seed``) for the trainer's validation and the best checkpoint.

Files (mannlab.data.thumos reads them, never downloads them), looked for under the data
directory (``data_dir``, ``--data-dir DIR``; default ``$MANNLAB_DATA``, else
``~/.cache/mannlab``) in ``DIR/thumos14/`` and ``DIR/``:

- the published temporal annotations, ``TH14_Temporal_annotations_validation.zip`` and
  ``TH14_Temporal_annotations_test.zip`` (or their unpacked directories): per-class files
  ``<Class>_val.txt`` / ``<Class>_test.txt`` of lines ``video start_seconds end_seconds``;
  or give the paths as ``annotations_validation`` / ``annotations_test``;
- per-snippet features of every annotated video (one (T, D) float array per video, step t
  covering frames [16 t, 16 t + 16), e.g. C3D): ``features`` names a directory of
  ``<video>.npy``, an ``.npz`` or an HDF5 file (``<video>`` or ``<video>/c3d_features``
  datasets); the default name "features" is looked for as ``features/``, ``features.npz``,
  ``features.h5`` and ``features.hdf5``. ``test_features``: another file for the test videos
  (default: the same);
- frame rates: ``fps`` (30) for every video, or ``video_info``, a CSV of ``video,fps`` rows
  (``DIR/thumos14/video_info.csv`` is used when it exists and ``video_info`` is not given).

Segments running more than a snippet past their video's features are left out
(``out_of_range = "drop"``; a few published annotations do), "error" stops instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mannlab.data.download import data_root
from mannlab.data.thumos import DATASET, OUT_OF_RANGE, find_annotations, load_thumos14
from mannlab.errors import ConfigError, DataError
from mannlab.tasks.base import check_int
from mannlab.tasks.dataset import check_download
from mannlab.tasks.proposal_math import ProposalVideo
from mannlab.tasks.proposals import ProposalTask, check_number

FEATURE_SUFFIXES = ("", ".npz", ".h5", ".hdf5")
VIDEO_INFO = "video_info.csv"


def _optional_path(params: dict, key: str) -> None:
    value = params[key]
    if value is not None and (not isinstance(value, str) or not value or "\x00" in value):
        raise ConfigError(f"{key} must be a path (string) or absent, got {value!r}")


def find_file(name: str, data_dir: str | None, what: str, suffixes: tuple[str, ...] = ("",)) -> Path:
    """``name`` as given if it exists, else under ``<root>/thumos14`` or ``<root>`` (with each of
    ``suffixes``); DataError listing where it was looked for."""
    given = Path(name).expanduser()
    if given.exists():
        return given
    root = data_root(data_dir)
    tried = []
    for base in (root / DATASET, root):
        for suffix in suffixes:
            candidate = base / f"{name}{suffix}"
            if candidate.exists():
                return candidate
            tried.append(str(candidate))
    raise DataError(
        f"THUMOS'14 {what} not found: looked for {', '.join(tried)}. Put them in "
        f"{root / DATASET} (one (T, D) float array per annotated video: a directory of "
        f"<video>.npy, an .npz or an HDF5 file), or choose the data directory with --data-dir DIR"
    )


def _load(p: dict[str, Any]) -> dict[str, list[ProposalVideo]]:
    data_dir = p["data_dir"]
    annotations = {  # first: without them nothing else matters
        split: find_annotations(split, data_dir)
        if p[f"annotations_{split}"] is None
        else p[f"annotations_{split}"]
        for split in ("validation", "test")
    }
    features = find_file(p["features"], data_dir, "features", FEATURE_SUFFIXES)
    test_features = (
        features
        if p["test_features"] is None
        else find_file(p["test_features"], data_dir, "test features", FEATURE_SUFFIXES)
    )
    info = p["video_info"]
    if info is None and (data_root(data_dir) / DATASET / VIDEO_INFO).is_file():
        info = str(data_root(data_dir) / DATASET / VIDEO_INFO)
    common = dict(
        fps=p["fps"],
        video_info=info,
        snippet_frames=p["snippet_frames"],
        data_dir=data_dir,
        out_of_range=p["out_of_range"],
    )
    validation = [
        ProposalVideo(*v.proposal_fields())
        for v in load_thumos14(annotations["validation"], features, "validation", **common)
    ]
    test = [
        ProposalVideo(*v.proposal_fields())
        for v in load_thumos14(annotations["test"], test_features, "test", **common)
    ]
    held = p["valid_videos"]
    if held >= len(validation):
        raise ConfigError(
            f"valid_videos must be < {len(validation)} (the annotated validation videos, "
            f"the rest train), got {held}"
        )
    order = np.random.default_rng(p["split_seed"]).permutation(len(validation))
    valid = sorted(order[:held].tolist())
    train = sorted(order[held:].tolist())
    return {
        "train": [validation[i] for i in train],
        "valid": [validation[i] for i in valid],
        "test": test,
    }


class ThumosProposalTask(ProposalTask):
    """THUMOS'14 proposals (see the module docstring)."""

    name = "thumos14-proposals"
    defaults = {
        "data_dir": None,
        "annotations_validation": None,
        "annotations_test": None,
        "features": "features",
        "test_features": None,
        "fps": 30.0,
        "video_info": None,
        "snippet_frames": 16,
        "out_of_range": "drop",
        "valid_videos": 20,
        "split_seed": 0,
        **ProposalTask.common,
    }

    def __init__(self, download: bool = False, **params: Any) -> None:
        if check_download(download):
            raise DataError(
                "THUMOS'14 cannot be downloaded by mannlab: its per-snippet features are extracted "
                "from the videos, and the annotations come from the THUMOS'14 site; put both in "
                "--data-dir DIR as the thumos14-proposals task's documentation says, and run without "
                "--download"
            )
        super().__init__(**params)

    def _validate(self, params: dict[str, Any]) -> None:
        super()._validate(params)
        for key in ("data_dir", "annotations_validation", "annotations_test", "test_features", "video_info"):
            _optional_path(params, key)
        if not isinstance(params["features"], str) or not params["features"] or "\x00" in params["features"]:
            raise ConfigError(f"features must be a path or a name (string), got {params['features']!r}")
        check_number(params, "fps", 0.0, 1000.0, low_open=True)
        check_int(params, "snippet_frames", minimum=1)
        check_int(params, "valid_videos", minimum=1)
        check_int(params, "split_seed", minimum=0)
        if params["out_of_range"] not in OUT_OF_RANGE:
            raise ConfigError(f"out_of_range must be one of {OUT_OF_RANGE}, got {params['out_of_range']!r}")

    def load_videos(self) -> dict[str, list[ProposalVideo]]:
        return _load(self.params)
