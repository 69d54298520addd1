"""Per-video feature arrays: one (T, D) float array per video name, as proposal models read them.

SST (Buch et al. CVPR 2017) and the ARMIN paper (section 4.3, appendix C.3) feed a recurrent
model one feature vector per 16-frame snippet of a video (C3D features, usually reduced to
500 dimensions); any other per-snippet features work the same way. Three layouts are read:

- a directory of ``<video>.npy`` files (top level only), one (T, D) array each;
- one ``.npz`` file (``numpy.savez``) holding one array per video name;
- an HDF5 file (``.h5``, ``.hdf5``) with a dataset per video, either ``<video>`` itself or
  ``<video>/c3d_features`` (SST's published layout). This needs ``h5py``, which mannlab does
  not depend on: without it the error says to install it or to save the arrays as ``.npz``.

Only the videos asked for are read. Arrays are loaded without pickles (``.npy`` headers are
checked before anything is allocated) and each array, and all of them together, are bounded
(``MAX_VIDEO_BYTES``, ``MAX_TOTAL_BYTES``). Every array must be 2-D, floating point, finite,
with at least one step and one dimension, and of the same D across videos; anything else is
a DataError naming the file and the video. Arrays are returned as float32.

    arrays = read_features("c3d_features.npz", ["video_test_0000004", "video_test_0000006"])
"""

from __future__ import annotations

import importlib
import os
import zipfile
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from mannlab.data.download import CORRUPT_ARCHIVE, corrupt, open_data, read_capped, read_members, too_large
from mannlab.data.strokes import parse_npy
from mannlab.errors import DataError
from mannlab.file_kinds import kind_of

#: one video's array (C3D fc7, 4,096 float32 values per snippet, of a 30-minute video at
#: 30 fps is about 1.8 GB; SST's 500-D features of the longest THUMOS'14 video are a few MB)
MAX_VIDEO_BYTES = 2 << 30
#: all videos' arrays together (all 413 annotated THUMOS'14 videos as 4,096-D float32 C3D
#: features are about 3.5 GB)
MAX_TOTAL_BYTES = 16 << 30
_EXPECTED = "one (T, D) float array per video (per-snippet features)"
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf")
#: the dataset under a video's group in SST's published HDF5 features
HDF5_DATASET = "c3d_features"
#: how many missing names an error lists before it only counts the rest
LISTED = 5


def read_features(
    source: str | os.PathLike | Mapping[str, np.ndarray], videos: Iterable[str]
) -> dict[str, np.ndarray]:
    """The (T, D) float32 array of every name in ``videos``, from ``source``: a directory of
    ``<video>.npy``, an ``.npz`` file, an HDF5 file, or a mapping of name to array.

    DataError when ``source`` does not exist or has an unknown layout, when some videos have
    no array (the message lists the first few and counts them), and for arrays that are not
    2-D, not floating point, not finite, empty or of a D that differs between videos.
    """
    wanted = sorted(set(videos))
    if isinstance(source, Mapping):
        found, where = {name: source[name] for name in wanted if name in source}, "the features mapping"
    else:
        path = Path(source)
        where = str(path)
        if path.is_dir():
            where = f"the directory {path}"
            found = _read_npy_directory(path, wanted)
        elif path.is_file() and path.name.endswith(".npz"):
            found = _read_npz(path, wanted)
        elif path.is_file() and path.name.endswith(HDF5_SUFFIXES):
            found = _read_hdf5(path, wanted)
        elif path.is_file():
            raise DataError(
                f"{path}: unknown feature layout; expected a directory of <video>.npy files, "
                f"an .npz file or an HDF5 file (.h5) holding one (T, D) array per video"
            )
        elif os.path.lexists(path):  # a FIFO, a device, a link to nowhere
            raise DataError(
                f"features {path} is {kind_of(path)}; expected a directory of <video>.npy files, "
                f"an .npz file or an HDF5 file (.h5) holding one (T, D) array per video"
            )
        else:
            raise DataError(
                f"features {path} not found; expected a directory of <video>.npy files, an .npz "
                f"file or an HDF5 file (.h5) holding one (T, D) array per video"
            )
    missing = [name for name in wanted if name not in found]
    if missing:
        raise DataError(f"{where}: {missing_videos(missing)} have no features; expected {_EXPECTED}")
    return check_arrays(found, where)


def missing_videos(names: list[str]) -> str:
    """``names`` for an error message: the first few, then how many more."""
    shown = ", ".join(names[:LISTED])
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return f"{len(names)} annotated video{'s' if len(names) != 1 else ''} ({shown}{more})"


def check_arrays(arrays: dict[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """``arrays`` as float32, in name order; DataError naming ``where`` and the video for an
    array that is not 2-D, not floating point, empty, not finite, or of another D."""
    out: dict[str, np.ndarray] = {}
    first: tuple[str, int] | None = None
    for name in sorted(arrays):
        array = np.asarray(arrays[name])
        what = f"{where}, video {name}"
        if array.ndim != 2:
            raise DataError(f"{what}: expected a (T, D) array, got shape {array.shape}")
        if array.dtype.kind != "f":
            raise DataError(f"{what}: expected floating-point features, got dtype {array.dtype}")
        if array.shape[0] == 0 or array.shape[1] == 0:
            raise DataError(
                f"{what}: expected at least one step of at least one value, got shape {array.shape}"
            )
        bad = np.argwhere(~np.isfinite(array))
        if bad.size:
            step, column = bad[0]
            raise DataError(
                f"{what}: expected finite features, got {array[step, column]} at step {step}, column {column}"
            )
        if first is None:
            first = (name, array.shape[1])
        elif array.shape[1] != first[1]:
            raise DataError(
                f"{what}: {array.shape[1]} features per step, but video {first[0]} has {first[1]}; "
                f"expected the same D for every video"
            )
        out[name] = np.ascontiguousarray(array, dtype=np.float32)
    return out


def _read_npy_directory(path: Path, wanted: list[str]) -> dict[str, np.ndarray]:
    files = {f"{name}.npy": name for name in wanted}
    members = read_members(path, files.__contains__, MAX_VIDEO_BYTES, _EXPECTED, MAX_TOTAL_BYTES)
    return {files[rel]: parse_npy(data, str(path / rel)) for rel, data in members.items()}


def _read_npz(path: Path, wanted: list[str]) -> dict[str, np.ndarray]:
    """The wanted arrays of an .npz (a zip of .npy members), each read in blocks up to the
    limit; members are read only as bytes, never extracted."""
    files = {f"{name}.npy": name for name in wanted}
    out: dict[str, np.ndarray] = {}
    budget = MAX_TOTAL_BYTES
    try:
        with open_data(path) as fh, zipfile.ZipFile(fh) as archive:
            for info in archive.infolist():
                if info.is_dir() or info.filename not in files:
                    continue
                where = f"{path}/{info.filename}"
                cap = min(MAX_VIDEO_BYTES, budget)
                if info.file_size > cap:
                    raise too_large(where, cap, _EXPECTED)
                with archive.open(info) as member:
                    data = read_capped(member, cap, where, _EXPECTED)
                budget -= len(data)
                out[files[info.filename]] = parse_npy(data, where)
    except DataError:
        raise
    except CORRUPT_ARCHIVE as exc:
        raise corrupt(path, exc, "an .npz file") from None
    return out


def _read_hdf5(path: Path, wanted: list[str]) -> dict[str, np.ndarray]:
    """The wanted datasets (``<video>`` or ``<video>/c3d_features``) of an HDF5 file."""
    try:
        h5py = importlib.import_module("h5py")
    except ImportError:
        raise DataError(
            f"{path} is an HDF5 file; reading it needs h5py (pip install h5py), which mannlab "
            f"does not install. Or save the arrays as an .npz file (numpy.savez, one array per "
            f"video name) or a directory of <video>.npy files"
        ) from None
    out: dict[str, np.ndarray] = {}
    budget = MAX_TOTAL_BYTES
    try:
        with open_data(path) as fh, h5py.File(fh, "r") as h5:
            for name in wanted:
                if name not in h5:
                    continue
                if isinstance(h5.get(name, getlink=True), h5py.ExternalLink):
                    raise DataError(
                        f"{path}: {name} is a link to another file; expected the features stored in this file"
                    )
                node = h5[name]
                where = f"{path}, dataset {name}"
                if isinstance(node, h5py.Group):
                    if HDF5_DATASET not in node or not isinstance(node[HDF5_DATASET], h5py.Dataset):
                        raise DataError(
                            f"{path}: group {name} has no dataset {HDF5_DATASET!r}; expected "
                            f"{name}/{HDF5_DATASET} (SST's layout) or a dataset named {name}"
                        )
                    node, where = node[HDF5_DATASET], f"{path}, dataset {name}/{HDF5_DATASET}"
                if node.dtype.kind != "f":
                    raise DataError(f"{where}: expected floating-point features, got dtype {node.dtype}")
                cap = min(MAX_VIDEO_BYTES, budget)
                if node.nbytes > cap:
                    raise too_large(where, cap, _EXPECTED, decompressed=False)
                out[name] = node[()]
                budget -= out[name].nbytes
    except DataError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
        raise corrupt(path, exc, "an HDF5 file") from None
    return out
