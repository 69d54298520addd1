"""THUMOS'14 annotations and per-video features: the published per-class layout in a directory
and in a zip, features as .npy files, .npz and a mapping, seconds to steps, and a DataError
naming file, line or video for every malformed input (fixtures made here, never real data)."""

import io
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import corrupt, fuzz_settings, no_hang
from mannlab.data import download, thumos, video_features
from mannlab.errors import ConfigError, DataError

V1, V2 = "video_validation_0000001", "video_validation_0000002"
FILES = {
    # 30 fps, 16 frames per step: a second is 1.875 steps
    "Diving_val.txt": f"{V1}  1.6 3.2\n{V1}  16.0 24.0\n\n{V2} 8.0 21.6\n",
    "CliffDiving_val.txt": f"{V1} 16.0 24.0\n",
    "Ambiguous_val.txt": f"{V1} 0.0 1.6\nvideo_validation_0000003 1 2\n",
    "Diving_test.txt": "video_test_0000001 1 2\n",  # the other split: ignored
}
FEATURES = {V1: np.arange(100 * 3, dtype=np.float32).reshape(100, 3), V2: np.ones((40, 3), np.float64)}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    def refuse(url, path):
        raise ConnectionError(f"tests are offline ({url})")

    monkeypatch.setattr(download, "urlretrieve", refuse)


def write_dir(folder, files):
    (folder / "annotation").mkdir(parents=True)
    (folder / "readme.txt").write_text("THUMOS'14 temporal annotations\n")
    for name, text in files.items():
        (folder / "annotation" / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return folder


def write_zip(path, files, prefix="TH14_Temporal_annotations_validation/annotation/"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("TH14_Temporal_annotations_validation/readme.txt", "readme\n")
        for name, text in files.items():
            archive.writestr(prefix + name, text)
    return path


def npy_bytes(array):
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def write_npy_dir(folder, arrays):
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        (folder / f"{name}.npy").write_bytes(npy_bytes(array))
    return folder


def load(tmp_path, files=FILES, features=FEATURES, **kwargs):
    return thumos.load_thumos14(write_dir(tmp_path / "ann", files), features, **kwargs)


def test_directory_zip_and_feature_layouts_give_the_same_videos(tmp_path):
    ann_dir = write_dir(tmp_path / "dir", FILES)
    ann_zip = write_zip(tmp_path / "TH14_Temporal_annotations_validation.zip", FILES)
    npy_dir = write_npy_dir(tmp_path / "npy", {**FEATURES, "video_test_0000009": np.zeros((2, 3))})
    np.savez(tmp_path / "features.npz", **FEATURES)
    loads = [
        thumos.load_thumos14(ann, feats)
        for ann in (ann_dir, ann_zip)
        for feats in (npy_dir, tmp_path / "features.npz", FEATURES)
    ]
    for videos in loads:
        assert [v.name for v in videos] == [V1, V2]  # video_validation_0000003: ambiguous only
        first, second = videos
        assert first.segments_seconds.tolist() == [[1.6, 3.2], [16.0, 24.0], [16.0, 24.0]]
        assert first.classes == ("Diving", "CliffDiving", "Diving")
        assert first.ambiguous_seconds.tolist() == [[0.0, 1.6]]
        np.testing.assert_allclose(first.segments_steps(), [[3.0, 6.0], [30.0, 45.0]])  # each interval once
        assert first.segments_steps(unique=False).shape == (3, 2)
        np.testing.assert_allclose(first.ambiguous_steps(), [[0.0, 3.0]])
        # ends 0.5 steps past the features' 40 steps: clipped to their end
        np.testing.assert_allclose(second.segments_steps(), [[15.0, 40.0]])
        assert first.features.dtype == np.float32 and second.features.shape == (40, 3)
        assert np.array_equal(first.features, FEATURES[V1])
        assert (first.fps, first.snippet_frames) == (30.0, 16)
    for videos in loads[1:]:
        for a, b in zip(videos, loads[0]):
            assert a.name == b.name and np.array_equal(a.features, b.features)
            assert np.array_equal(a.segments_seconds, b.segments_seconds) and a.classes == b.classes


def test_proposal_fields_and_time_conversions(tmp_path):
    video = load(tmp_path)[0]
    name, features, segments, fps, snippet_frames = video.proposal_fields()
    assert name == V1 and features is video.features and (fps, snippet_frames) == (30.0, 16)
    assert np.array_equal(segments, video.segments_steps())
    np.testing.assert_allclose(thumos.seconds_to_steps([1.6, 16.0], 30.0, 16), [3.0, 30.0])
    np.testing.assert_allclose(thumos.steps_to_seconds([3.0, 30.0], 30.0, 16), [1.6, 16.0])
    # the test split reads the _test.txt files only
    test = thumos.load_thumos14(
        write_dir(tmp_path / "t", FILES), {"video_test_0000001": np.zeros((4, 3))}, split="test"
    )
    assert [v.name for v in test] == ["video_test_0000001"] and test[0].classes == ("Diving",)


def test_frame_rates_per_video(tmp_path):
    info = tmp_path / "info.csv"
    info.write_text(f"video-name,duration,frame-rate\n{V1},53.3,25\n{V2},21.3,30\n")
    first, second = load(tmp_path, video_info=info)
    assert (first.fps, second.fps) == (25.0, 30.0)
    np.testing.assert_allclose(first.segments_steps()[0], [1.6 * 25 / 16, 3.2 * 25 / 16])
    plain = tmp_path / "plain.csv"
    plain.write_text(f"{V1},25\n{V2},30\n")
    assert [v.fps for v in thumos.load_thumos14(tmp_path / "ann", FEATURES, video_info=plain)] == [25.0, 30.0]
    assert [v.fps for v in thumos.load_thumos14(tmp_path / "ann", FEATURES, video_info={V1: 25, V2: 30})] == [
        25.0,
        30.0,
    ]
    plain.write_text(f"{V1},25\n")
    with pytest.raises(DataError, match=rf"plain.csv: 1 annotated video \({V2}\) have no frame rate"):
        thumos.load_thumos14(tmp_path / "ann", FEATURES, video_info=plain)
    for text, what in (
        (f"{V1},0\n", "line 1: expected a frame rate > 0"),
        (f"{V1},25\n{V2},nan\n", "line 2: expected a frame rate > 0"),
        (f"{V1},25\n{V1},30\n", "line 2: video video_validation_0000001 listed again"),
        ("name,length\n", "line 1: expected `video,fps` rows or a header"),
        (f"video,fps\n{V1}\n", "line 2: expected `video,fps`"),
    ):
        plain.write_text(text)
        with pytest.raises(DataError, match=what):
            thumos.read_video_info(plain)


def test_annotations_are_found_in_the_data_directory_never_downloaded(tmp_path):
    with pytest.raises(DataError) as error:
        thumos.find_annotations("test", tmp_path)
    message = str(error.value)
    assert "https://www.crcv.ucf.edu/THUMOS14/test_set/TH14_Temporal_annotations_test.zip" in message
    assert "--data-dir DIR" in message and str(tmp_path / "thumos14") in message
    assert "no checksum is published" in message
    archive = write_zip(tmp_path / "thumos14" / "TH14_Temporal_annotations_validation.zip", FILES)
    assert thumos.find_annotations("validation", tmp_path) == archive
    videos = thumos.load_thumos14(None, FEATURES, data_dir=tmp_path)
    assert [v.name for v in videos] == [V1, V2]
    with pytest.raises(DataError, match="annotations .*missing.zip not found; the published"):
        thumos.load_thumos14(tmp_path / "missing.zip", FEATURES)


@pytest.mark.parametrize(
    "line, what",
    [
        (f"{V1} 1 2 3", "line 2: expected 3 fields \\(video start_seconds end_seconds\\), got 4"),
        (f"{V1} 1", "line 2: expected 3 fields"),
        (f"{V1} one 2", "line 2: expected a finite number of seconds, got 'one'"),
        (f"{V1} nan 2", "line 2: expected a finite number of seconds, got 'nan'"),
        (f"{V1} 1 inf", "line 2: expected a finite number of seconds, got 'inf'"),
        (f"{V1} -1 2", "line 2: expected times >= 0 seconds, got '-1'"),
        (f"{V1} 3 2", "line 2: expected start < end, got start 3 >= end 2 seconds"),
        (f"{V1} 2 2", "line 2: expected start < end"),
        ("../etc/passwd 1 2", "line 2: expected a video name"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, what):
    files = {"Diving_val.txt": f"{V1} 1.6 3.2\n{line}\n"}
    with pytest.raises(DataError, match=r"annotation/Diving_val.txt, " + what):
        load(tmp_path, files)


@pytest.mark.parametrize(
    "files, what",
    [
        ({"Surfing_val.txt": f"{V1} 1 2\n"}, "Surfing_val.txt: unknown class 'Surfing'; expected one of"),
        ({"Diving_val.txt": "\n \n"}, "Diving_val.txt: no segments; expected lines"),
        ({"Ambiguous_val.txt": f"{V1} 1 2\n"}, "no annotation files found; expected <Class>_val.txt"),
        (
            {"Diving_test.txt": f"{V1} 1 2\n"},
            "no annotation files found.*TH14_Temporal_annotations_validation.zip",
        ),
        ({"Diving_val.txt": b"video\xff 1 2\n"}, "Diving_val.txt, line 1: expected UTF-8 text"),
    ],
)
def test_malformed_annotation_files(tmp_path, files, what):
    with pytest.raises(DataError, match=what):
        load(tmp_path, files)


def test_archive_problems(tmp_path, monkeypatch):
    outside = write_zip(tmp_path / "outside.zip", {"../Diving_val.txt": f"{V1} 1 2\n"}, prefix="")
    with pytest.raises(DataError, match="member '../Diving_val.txt' has a path outside the archive"):
        thumos.read_annotations(outside)
    twice = tmp_path / "twice.zip"
    with zipfile.ZipFile(twice, "w") as archive:
        archive.writestr("a/Diving_val.txt", f"{V1} 1 2\n")
        archive.writestr("b/Diving_val.txt", f"{V1} 1 2\n")
        archive.writestr("c/Diving_val.txt", f"{V1} 1 3\n")
    with pytest.raises(
        DataError, match=r"Diving_val.txt twice, with different contents \(a/Diving_val.txt and c/"
    ):
        thumos.read_annotations(twice)
    # an identical copy (the same archive unpacked twice) is read once; Windows separators work
    with zipfile.ZipFile(twice, "w") as archive:
        archive.writestr("a/Diving_val.txt", f"{V1} 1 2\n")
        archive.writestr("b/Diving_val.txt", f"{V1} 1 2\n")
        archive.writestr("annotation\\CliffDiving_val.txt", f"{V1} 1 2\n")
    assert thumos.read_annotations(twice).actions == {
        V1: [
            (1.0, 2.0, "CliffDiving", f"{twice}/annotation\\CliffDiving_val.txt, line 1"),
            (1.0, 2.0, "Diving", f"{twice}/a/Diving_val.txt, line 1"),
        ]
    }
    # macOS resource forks of the files are not annotation files
    with zipfile.ZipFile(tmp_path / "mac.zip", "w") as archive:
        archive.writestr("annotation/Diving_val.txt", f"{V1} 1 2\n")
        archive.writestr("__MACOSX/annotation/._Diving_val.txt", b"\x00\x05\x16\x07")
    assert list(thumos.read_annotations(tmp_path / "mac.zip").actions) == [V1]
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(DataError, match="broken.zip cannot be read"):
        thumos.read_annotations(tmp_path / "broken.zip")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DataError, match="expected the annotation zip or a directory"):
        thumos.read_annotations(tmp_path / "notes.txt")
    monkeypatch.setattr(thumos, "MAX_ANNOTATION_BYTES", 16)
    with pytest.raises(DataError, match="Diving_val.txt: more than 16 bytes"):
        thumos.read_annotations(write_zip(tmp_path / "big.zip", {"Diving_val.txt": f"{V1} 1 2\n" * 4}))


def test_missing_features_are_listed(tmp_path):
    names = [f"video_validation_{i:07d}" for i in range(1, 8)]
    files = {"Diving_val.txt": "".join(f"{name} 1 2\n" for name in names)}
    features = write_npy_dir(tmp_path / "npy", {names[3]: np.zeros((5, 2), np.float32)})
    with pytest.raises(DataError) as error:
        load(tmp_path, files, features)
    message = str(error.value)
    assert "6 annotated videos (video_validation_0000001, video_validation_0000002" in message
    assert "video_validation_0000006 and 1 more) have no features" in message
    assert "video_validation_0000004" not in message and str(tmp_path / "npy") in message
    with pytest.raises(DataError, match="features .*nowhere not found; expected a directory"):
        load(tmp_path / "b", files, tmp_path / "nowhere")
    (tmp_path / "feats.csv").write_text("1,2\n")
    with pytest.raises(DataError, match="feats.csv: unknown feature layout"):
        load(tmp_path / "c", files, tmp_path / "feats.csv")


@pytest.mark.parametrize(
    "array, what",
    [
        (
            np.zeros(100, np.float32),
            r"video video_validation_0000002: expected a \(T, D\) array, got shape \(100,\)",
        ),
        (
            np.zeros((40, 3), np.int64),
            "video video_validation_0000002: expected floating-point features, got dtype int64",
        ),
        (
            np.zeros((0, 3), np.float32),
            "expected at least one step of at least one value, got shape \\(0, 3\\)",
        ),
        (
            np.zeros((40, 4), np.float32),
            "video_validation_0000002: 4 features per step, but video video_valid",
        ),
        (np.where(np.eye(40, 3) > 0, np.nan, 0.0), "expected finite features, got nan at step 0, column 0"),
        (np.full((40, 3), np.inf, np.float16), "expected finite features, got inf at step 0, column 0"),
    ],
)
def test_bad_feature_arrays(tmp_path, array, what):
    features = write_npy_dir(tmp_path / "npy", {V1: FEATURES[V1], V2: array})
    with pytest.raises(DataError, match=what):
        load(tmp_path, features=features)


def test_bad_feature_files(tmp_path, monkeypatch):
    folder = write_npy_dir(tmp_path / "npy", FEATURES)
    (folder / f"{V2}.npy").write_bytes(npy_bytes(np.array([{"a": 1}], dtype=object)))
    with pytest.raises(DataError, match=f"{V2}.npy: expected an integer or float array, got dtype object"):
        load(tmp_path / "a", features=folder)
    (folder / f"{V2}.npy").write_bytes(npy_bytes(FEATURES[V2])[:-10])
    with pytest.raises(DataError, match=f"{V2}.npy: shape \\(40, 3\\) of float64 does not fit"):
        load(tmp_path / "b", features=folder)
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(DataError, match="broken.npz cannot be read as an .npz file"):
        load(tmp_path / "c", features=tmp_path / "broken.npz")
    np.savez(tmp_path / "features.npz", **FEATURES)
    monkeypatch.setattr(video_features, "MAX_VIDEO_BYTES", 1000)
    with pytest.raises(DataError, match=f"features.npz/{V1}.npy: more than 1,000 bytes"):
        load(tmp_path / "d", features=tmp_path / "features.npz")
    monkeypatch.setattr(video_features, "MAX_TOTAL_BYTES", 2000)
    monkeypatch.setattr(video_features, "MAX_VIDEO_BYTES", 1500)
    with pytest.raises(DataError, match="pass 2,000 bytes together"):
        load(tmp_path / "e", features=write_npy_dir(tmp_path / "npy2", FEATURES))


def test_segments_far_past_the_features_are_an_error_or_dropped(tmp_path):
    files = {"Diving_val.txt": f"{V1} 1.6 3.2\n{V2} 1 2\n{V2} 20.0 22.0\n"}  # 22 s = step 41.25 > 40 + 1
    with pytest.raises(DataError) as error:
        load(tmp_path, files)
    message = str(error.value)
    assert (
        "Diving_val.txt, line 3: video video_validation_0000002, segment 20-22 s ends at step 41.2" in message
    )
    assert "more than one snippet past its 40 steps" in message and "out_of_range='drop'" in message
    second = thumos.load_thumos14(tmp_path / "ann", FEATURES, out_of_range="drop")[1]
    assert second.segments_seconds.tolist() == [[1.0, 2.0]]
    # a segment wholly inside the last, partial snippet is left out after clipping
    files = {"Diving_val.txt": f"{V2} 1 2\n{V2} 21.4 21.8\n"}
    assert load(tmp_path / "p", files)[0].segments_seconds.tolist() == [[1.0, 2.0]]


def test_hdf5_features(tmp_path):
    try:
        import h5py
    except ImportError:
        (tmp_path / "features.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
        with pytest.raises(DataError, match="features.h5 is an HDF5 file; reading it needs h5py"):
            load(tmp_path, features=tmp_path / "features.h5")
        return
    with h5py.File(tmp_path / "features.h5", "w") as h5:
        h5[f"{V1}/c3d_features"] = FEATURES[V1]  # SST's layout
        h5[V2] = FEATURES[V2]  # a dataset per video
    videos = load(tmp_path, features=tmp_path / "features.h5")
    assert all(np.array_equal(v.features, FEATURES[v.name]) for v in videos)


def test_arguments_are_checked(tmp_path):
    ann = write_dir(tmp_path / "ann", FILES)
    for kwargs, what in (
        ({"split": "train"}, "split must be one of \\('validation', 'test'\\)"),
        ({"fps": 0}, "fps must be a number > 0"),
        ({"fps": float("nan")}, "fps must be a number > 0"),
        ({"snippet_frames": 0}, "snippet_frames must be an integer >= 1"),
        ({"out_of_range": "clip"}, "out_of_range must be one of"),
    ):
        with pytest.raises(ConfigError, match=what):
            thumos.load_thumos14(ann, FEATURES, **kwargs)


def zip_bytes(files):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


ANNOTATION_ZIP = zip_bytes({f"annotation/{name}": text for name, text in FILES.items()})
NPZ = zip_bytes({f"{name}.npy": npy_bytes(array) for name, array in FEATURES.items()})


@fuzz_settings(40)
@given(
    annotations=st.one_of(
        st.just(ANNOTATION_ZIP),
        corrupt(ANNOTATION_ZIP),
        corrupt(FILES["Diving_val.txt"].encode()).map(lambda text: zip_bytes({"Diving_val.txt": text})),
    ),
    features=st.one_of(
        st.just(NPZ),
        corrupt(NPZ),
        corrupt(npy_bytes(FEATURES[V2])).map(
            lambda data: zip_bytes({f"{V1}.npy": npy_bytes(FEATURES[V1]), f"{V2}.npy": data})
        ),
    ),
)
def test_corrupt_archives_load_or_raise_data_error(annotations, features):
    with tempfile.TemporaryDirectory() as folder, no_hang():
        (Path(folder) / "a.zip").write_bytes(annotations)
        (Path(folder) / "f.npz").write_bytes(features)
        try:
            videos = thumos.load_thumos14(Path(folder) / "a.zip", Path(folder) / "f.npz")
        except DataError:
            return
        for video in videos:
            assert video.features.ndim == 2 and np.isfinite(video.features).all()
            steps = video.segments_steps()
            assert (steps[:, 0] < steps[:, 1]).all() and (steps >= 0).all()
            assert (steps <= len(video.features)).all()
