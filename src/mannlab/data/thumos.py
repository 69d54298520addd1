"""THUMOS'14 temporal action annotations with per-video features, for action proposals.

The ARMIN paper (section 4.3, appendix C.3) evaluates temporal action proposals as SST (Buch
et al. CVPR 2017) does: on THUMOS'14, training on the validation split's temporally
annotated videos and testing on the test split's, one feature vector per 16-frame snippet.
This module reads what a user has of that data set; it never downloads it (below).

Annotations, as published (crcv.ucf.edu/THUMOS14): one text file per action class,
``<Class>_val.txt`` (validation) or ``<Class>_test.txt`` (test), each line
``video_name start_seconds end_seconds``; ``Ambiguous_val.txt`` / ``Ambiguous_test.txt``
list parts of videos taken out of evaluation (kept apart, never actions). They are read
from the published zip or its unpacked directory (files found at any depth by name). Only
the 20 THUMOS'14 classes are accepted; a video annotated in two classes (every CliffDiving
instance is also a Diving one) has its interval once per class.

No checksum of the two annotation archives is published, so they are not downloaded
unverified: without a copy the DataError says where to get it and where to put it.

Features: any (T, D) float array per video (``mannlab.data.video_features``: a directory of
``<video>.npy``, an ``.npz``, or HDF5 with h5py). Step t covers frames
``[snippet_frames * t, snippet_frames * (t + 1))``, so a time in seconds is at step
``seconds * fps / snippet_frames``. The frame rate is one number (``fps``, 30 for most
THUMOS'14 videos) or per video (``video_info``: a CSV of ``video,fps`` rows, or a mapping).

A segment may end after the last full snippet (the video's last frames make no snippet):
up to one snippet past the T steps it is clipped to the features' end (and left out if
nothing is left); further is a DataError naming the file, line and video, since it usually
means a wrong fps or snippet_frames. A few published annotations do run past their video's
end; ``out_of_range="drop"`` leaves such segments out instead.

    videos = load_thumos14("TH14_Temporal_annotations_test.zip", "c3d.npz", split="test")
    videos[0].segments_steps()          # (M, 2) float64 [start, end) in steps
"""

from __future__ import annotations

import csv
import math
import os
import re
from pathlib import Path, PurePosixPath
from typing import Mapping, NamedTuple

import numpy as np

from mannlab.data.download import (
    RemoteFile,
    check_inside,
    data_root,
    decode_text,
    read_file,
    read_members,
)
from mannlab.data.video_features import missing_videos, read_features
from mannlab.errors import ConfigError, DataError

DATASET = "thumos14"
#: the 20 classes with temporal annotations (the archives' readme)
CLASSES = (
    "BaseballPitch",
    "BasketballDunk",
    "Billiards",
    "CleanAndJerk",
    "CliffDiving",
    "CricketBowling",
    "CricketShot",
    "Diving",
    "FrisbeeCatch",
    "GolfSwing",
    "HammerThrow",
    "HighJump",
    "JavelinThrow",
    "LongJump",
    "PoleVault",
    "Shotput",
    "SoccerPenalty",
    "TennisSwing",
    "ThrowDiscus",
    "VolleyballSpiking",
)
AMBIGUOUS = "Ambiguous"
#: split name -> the suffix of its annotation files
SUFFIXES = {"validation": "val", "test": "test"}
# Canonical addresses; no checksum is published, so none is pinned and nothing is downloaded.
ARCHIVES = {
    "validation": RemoteFile(
        "https://www.crcv.ucf.edu/THUMOS14/Validation_set/TH14_Temporal_annotations_validation.zip"
    ),
    "test": RemoteFile("https://www.crcv.ucf.edu/THUMOS14/test_set/TH14_Temporal_annotations_test.zip"),
}
#: the directories the archives unpack to
UNPACKED = {
    "validation": ("TH14_Temporal_annotations_validation",),
    "test": ("TH14_Temporal_Annotations_Test", "TH14_Temporal_annotations_test"),
}
#: size limits: one class file (the largest published ones have a few hundred lines, some
#: KB), all of a split's files, and a video_info CSV
MAX_ANNOTATION_BYTES = 1 << 20
MAX_ANNOTATION_TOTAL_BYTES = 32 << 20
MAX_INFO_BYTES = 16 << 20
_EXPECTED = "a THUMOS'14 annotation file: lines `video start_seconds end_seconds`, some KB"
_CLASS_FILE = re.compile(r"^(?P<cls>.+)_(?P<suffix>val|test)\.txt$")
_VIDEO_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
OUT_OF_RANGE = ("error", "drop")


class ThumosVideo(NamedTuple):
    """One annotated video: features, its action segments in seconds and their classes.

    ``segments_seconds`` (M, 2) float64 ``[start, end)`` sorted by start, ``classes[i]`` the
    class of row i; ``ambiguous_seconds`` (A, 2) the parts taken out of evaluation.
    """

    name: str
    features: np.ndarray  # (T, D) float32
    segments_seconds: np.ndarray
    classes: tuple[str, ...]
    ambiguous_seconds: np.ndarray
    fps: float
    snippet_frames: int

    def segments_steps(self, unique: bool = True) -> np.ndarray:
        """The segments in steps, (M, 2) float64 within [0, T]. ``unique``: each interval once
        (the class-agnostic ground truth of proposals; a CliffDiving instance is also
        annotated as Diving), sorted; otherwise one row per annotation, as ``classes``."""
        steps = seconds_to_steps(self.segments_seconds, self.fps, self.snippet_frames)
        steps = np.clip(steps, 0.0, len(self.features))
        return np.unique(steps, axis=0).reshape(-1, 2) if unique else steps

    def ambiguous_steps(self) -> np.ndarray:
        """The ambiguous parts in steps, (A, 2) float64 within [0, T]."""
        steps = seconds_to_steps(self.ambiguous_seconds, self.fps, self.snippet_frames)
        return np.clip(steps, 0.0, len(self.features))

    def proposal_fields(self) -> tuple:
        """(name, features, segments in steps, fps, snippet_frames): the fields of
        ``mannlab.tasks.proposal_math.ProposalVideo`` in its order, so
        ``ProposalVideo(*video.proposal_fields())`` (data/ does not import tasks/)."""
        return (self.name, self.features, self.segments_steps(), float(self.fps), int(self.snippet_frames))


class ThumosAnnotations(NamedTuple):
    """A split's annotations: video -> list of (start, end, class, "file, line N"), and
    video -> list of (start, end, "file, line N") of the ambiguous parts (seconds)."""

    actions: dict[str, list[tuple[float, float, str, str]]]
    ambiguous: dict[str, list[tuple[float, float, str]]]


def seconds_to_steps(seconds, fps: float, snippet_frames: int) -> np.ndarray:
    """Times in seconds as (float) steps: ``seconds * fps / snippet_frames``."""
    return np.asarray(seconds, dtype=np.float64) * (float(fps) / snippet_frames)


def steps_to_seconds(steps, fps: float, snippet_frames: int) -> np.ndarray:
    """Steps as seconds: ``steps * snippet_frames / fps`` (proposals back to the video's time)."""
    return np.asarray(steps, dtype=np.float64) * (snippet_frames / float(fps))


# ------------------------------------------------------------------ annotations


def find_annotations(split: str, data_dir: str | os.PathLike | None = None) -> Path:
    """The local copy of ``split``'s annotation archive or its unpacked directory, looked for
    as ``download.locate`` does (``data_dir`` if it is a file; ``<root>/thumos14/<name>``,
    ``<root>/<name>``). Never downloads: DataError saying where to get it and put it."""
    _check_split(split)
    if data_dir is not None and Path(data_dir).is_file():
        return Path(data_dir)
    root = data_root(data_dir)
    remote, names = ARCHIVES[split], (ARCHIVES[split].name, *UNPACKED[split])
    for base in (root / DATASET, root):
        for name in names:
            if (base / name).exists():
                return check_inside(base / name, root)
    raise DataError(
        f"THUMOS'14 {split} annotations not found (looked for {' or '.join(names)} in "
        f"{root / DATASET} and {root}). Download {remote.url} (mannlab does not download it "
        f"itself: no checksum is published to verify it) and put it in {root / DATASET}, or "
        f"choose the data directory with --data-dir DIR (then DIR/{DATASET}/{remote.name}), "
        f"or pass the zip or its unpacked directory as the annotations"
    )


def parse_annotation_lines(text: str, where: str) -> list[tuple[str, float, float, str]]:
    """(video, start, end, "where, line N") of every non-blank line ``video start end``;
    DataError naming ``where`` and the line for a wrong field count, a bad video name, a
    time that is not a finite number, a negative time, or start >= end."""
    out = []
    for lineno, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        at = f"{where}, line {lineno}"
        if len(fields) != 3:
            raise DataError(
                f"{at}: expected 3 fields (video start_seconds end_seconds), got {len(fields)}: {line!r}"
            )
        name = fields[0]
        if not _VIDEO_NAME.match(name):
            raise DataError(f"{at}: expected a video name (letters, digits, _ . -), got {name!r}")
        times = []
        for field in fields[1:]:
            try:
                value = float(field)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise DataError(f"{at}: expected a finite number of seconds, got {field!r}")
            if value < 0:
                raise DataError(f"{at}: expected times >= 0 seconds, got {field!r}")
            times.append(value)
        start, end = times
        if start >= end:
            raise DataError(f"{at}: expected start < end, got start {start:g} >= end {end:g} seconds")
        out.append((name, start, end, at))
    return out


def read_annotations(source: str | os.PathLike, split: str = "validation") -> ThumosAnnotations:
    """``split``'s class files and ambiguous parts from ``source`` (the zip or a directory).

    DataError for: no class file of the split, a class that is not one of THUMOS'14's 20, a
    class file without segments, an archive member whose path leaves
    the archive, a file over ``MAX_ANNOTATION_BYTES``, and malformed lines. A class file found
    twice with the same contents is read once; with different contents it is a DataError.
    """
    _check_split(split)
    source = Path(source)
    if not source.exists():
        raise DataError(f"annotations {source} not found; {_where_to_get(split)}")
    if source.is_file() and not source.name.endswith(".zip"):
        raise DataError(f"{source}: expected the annotation zip or a directory of <Class>_*.txt files")
    suffix = SUFFIXES[split]

    def wanted(name: str) -> bool:
        path = _member_path(name)
        match = _CLASS_FILE.match(path.name)
        junk = "__MACOSX" in path.parts or path.name.startswith("._")
        return match is not None and match.group("suffix") == suffix and not junk

    members = read_members(source, wanted, MAX_ANNOTATION_BYTES, _EXPECTED, MAX_ANNOTATION_TOTAL_BYTES)
    by_class: dict[str, str] = {}
    for name in sorted(members):
        path = _member_path(name)
        if path.is_absolute() or ".." in path.parts:
            raise DataError(
                f"{source}: member {name!r} has a path outside the archive; expected relative "
                f"paths such as annotation/Diving_{suffix}.txt"
            )
        match = _CLASS_FILE.match(path.name)
        assert match is not None  # wanted() kept only the names it matches
        cls = match.group("cls")
        if cls not in CLASSES and cls != AMBIGUOUS:
            raise DataError(
                f"{source}/{name}: unknown class {cls!r}; expected one of the THUMOS'14 classes "
                f"({', '.join(CLASSES)}) or {AMBIGUOUS}"
            )
        if cls in by_class and members[by_class[cls]] != members[name]:
            raise DataError(
                f"{source}: {path.name} twice, with different contents ({by_class[cls]} and "
                f"{name}); expected one file per class"
            )
        by_class.setdefault(cls, name)  # an identical copy is read once
    if not set(by_class) - {AMBIGUOUS}:
        raise DataError(
            f"{source}: no annotation files found; expected <Class>_{suffix}.txt files of the "
            f"THUMOS'14 {split} split (e.g. Diving_{suffix}.txt, lines `video start_seconds "
            f"end_seconds`); {_where_to_get(split)}"
        )
    actions: dict[str, list] = {}
    ambiguous: dict[str, list] = {}
    for cls, name in sorted(by_class.items()):
        where = f"{source}/{name}"
        rows = parse_annotation_lines(decode_text(members[name], where), where)
        if cls == AMBIGUOUS:
            for video, start, end, at in rows:
                ambiguous.setdefault(video, []).append((start, end, at))
            continue
        if not rows:
            raise DataError(f"{where}: no segments; expected lines `video start_seconds end_seconds`")
        for video, start, end, at in rows:
            actions.setdefault(video, []).append((start, end, cls, at))
    return ThumosAnnotations(actions, ambiguous)


def _member_path(name: str) -> PurePosixPath:
    """An archive member's path, with the backslashes of zips made on Windows as separators."""
    return PurePosixPath(name.replace("\\", "/"))


def _where_to_get(split: str) -> str:
    remote = ARCHIVES[split]
    return (
        f"the published THUMOS'14 {split} annotations are {remote.url} (put {remote.name} "
        f"or its unpacked directory in DIR/{DATASET}/ and pass --data-dir DIR)"
    )


# ------------------------------------------------------------------ frame rates


def read_video_info(source: str | os.PathLike | Mapping[str, float]) -> dict[str, float]:
    """Frame rate per video from a CSV file of ``video,fps`` rows (an optional header row may
    name the columns: video / video-name / name, and fps / frame-rate) or from a mapping.
    DataError naming the file and line for a bad row, a rate that is not a positive finite
    number, or a video listed twice with different rates."""
    if isinstance(source, Mapping):
        return {str(name): _rate(value, f"video_info[{name!r}]") for name, value in source.items()}
    path = Path(source)
    if not os.path.lexists(path):  # anything else there is named by read_file
        raise DataError(f"video_info {path} not found; expected a CSV file of `video,fps` rows")
    text = decode_text(read_file(path, MAX_INFO_BYTES, "a CSV of `video,fps` rows"), str(path))
    rows = [(n, row) for n, row in enumerate(csv.reader(text.lstrip("\ufeff").splitlines()), 1) if row]
    columns = (0, 1)
    first = rows[0][1] if rows else []
    if first and not _is_number(first[1] if len(first) > 1 else ""):
        columns, rows = _header(first, path), rows[1:]
    out: dict[str, float] = {}
    for lineno, row in rows:
        at = f"{path}, line {lineno}"
        if len(row) <= max(columns):
            raise DataError(f"{at}: expected `video,fps`, got {','.join(row)!r}")
        name, rate = row[columns[0]].strip(), _rate(row[columns[1]], at)
        if name in out and out[name] != rate:
            raise DataError(
                f"{at}: video {name} listed again with another frame rate ({out[name]:g}, {rate:g})"
            )
        out[name] = rate
    return out


def _header(row: list[str], path: Path) -> tuple[int, int]:
    names = [cell.strip().lower() for cell in row]
    video = [i for i, n in enumerate(names) if n in ("video", "video-name", "video_name", "name")]
    rate = [i for i, n in enumerate(names) if n in ("fps", "frame-rate", "frame_rate", "framerate")]
    if not video or not rate:
        raise DataError(
            f"{path}, line 1: expected `video,fps` rows or a header naming a video column "
            f"(video, video-name) and a frame-rate column (fps, frame-rate), got {','.join(row)!r}"
        )
    return video[0], rate[0]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _rate(value, at: str) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        rate = math.nan
    if not math.isfinite(rate) or rate <= 0:
        raise DataError(f"{at}: expected a frame rate > 0 (frames per second), got {value!r}")
    return rate


# ------------------------------------------------------------------ loading


def load_thumos14(
    annotations: str | os.PathLike | None,
    features: str | os.PathLike | Mapping[str, np.ndarray],
    split: str = "validation",
    fps: float = 30.0,
    video_info: str | os.PathLike | Mapping[str, float] | None = None,
    snippet_frames: int = 16,
    data_dir: str | os.PathLike | None = None,
    out_of_range: str = "error",
) -> list[ThumosVideo]:
    """Every video of ``split`` with action annotations, in name order, with its features.

    ``annotations``: the zip or its unpacked directory (None: ``find_annotations(split,
    data_dir)``). ``features``: see ``video_features.read_features``; every annotated video
    must have an array (DataError listing those without). ``fps``: the frame rate of every
    video, unless ``video_info`` (CSV path or mapping) gives one per video, which must then
    cover every annotated video. ``out_of_range``: "error" (default) or "drop" for segments
    ending more than one snippet past their features (see the module docstring).
    """
    _check_split(split)
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
        raise ConfigError(f"fps must be a number > 0 (frames per second), got {fps!r}")
    if isinstance(snippet_frames, bool) or not isinstance(snippet_frames, int) or snippet_frames < 1:
        raise ConfigError(f"snippet_frames must be an integer >= 1 (frames per step), got {snippet_frames!r}")
    if out_of_range not in OUT_OF_RANGE:
        raise ConfigError(f"out_of_range must be one of {OUT_OF_RANGE}, got {out_of_range!r}")
    source = find_annotations(split, data_dir) if annotations is None else Path(annotations)
    parsed = read_annotations(source, split)
    names = sorted(parsed.actions)
    arrays = read_features(features, names)
    rates = {name: float(fps) for name in names}
    if video_info is not None:
        given = read_video_info(video_info)
        missing = [name for name in names if name not in given]
        if missing:
            where = "video_info" if isinstance(video_info, Mapping) else str(video_info)
            raise DataError(
                f"{where}: {missing_videos(missing)} have no frame rate; expected a row `video,fps` each"
            )
        rates = {name: given[name] for name in names}
    return [_video(name, arrays[name], parsed, rates[name], snippet_frames, out_of_range) for name in names]


def _video(
    name: str,
    features: np.ndarray,
    parsed: ThumosAnnotations,
    fps: float,
    snippet_frames: int,
    out_of_range: str,
) -> ThumosVideo:
    """The record of one video: segments checked against and clipped to its features."""
    steps = len(features)
    limit = steps * snippet_frames / fps  # seconds covered by the features
    rows = []
    for start, end, cls, at in sorted(parsed.actions[name]):
        end_step = end * fps / snippet_frames
        if end_step > steps + 1 + 1e-9:
            if out_of_range == "drop":
                continue
            raise DataError(
                f"{at}: video {name}, segment {start:g}-{end:g} s ends at step {end_step:.1f}, more "
                f"than one snippet past its {steps} steps of features ({limit:.1f} s at {fps:g} fps, "
                f"{snippet_frames} frames per step); expected segments inside the video. Check that "
                f"fps (or video_info) and snippet_frames match the features, or pass "
                f"out_of_range='drop' to leave such segments out (a few published THUMOS'14 "
                f"annotations run past their video's end)"
            )
        if min(end, limit) > start:
            rows.append((start, min(end, limit), cls))
    ambiguous = [
        (s, min(e, limit)) for s, e, _ in sorted(parsed.ambiguous.get(name, [])) if min(e, limit) > s
    ]
    return ThumosVideo(
        name=name,
        features=features,
        segments_seconds=np.array([r[:2] for r in rows], dtype=np.float64).reshape(-1, 2),
        classes=tuple(r[2] for r in rows),
        ambiguous_seconds=np.array(ambiguous, dtype=np.float64).reshape(-1, 2),
        fps=fps,
        snippet_frames=snippet_frames,
    )


def _check_split(split: str) -> None:
    if split not in SUFFIXES:
        raise ConfigError(f"THUMOS'14 split must be one of {tuple(SUFFIXES)}, got {split!r}")
