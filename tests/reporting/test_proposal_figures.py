"""ARMIN figure 2: average recall vs proposals and recall vs tIoU, one curve (or band) per model."""

import matplotlib

matplotlib.use("Agg")  # no screen on CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mannlab.reporting.proposal_figures import plot_recall_vs_proposals, plot_recall_vs_tiou  # noqa: E402

NUMBERS = np.array([1.0, 10.0, 100.0, 1000.0])
TIOUS = np.round(np.arange(1, 21) * 0.05, 2)


def _is_png(path):
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_recall_vs_proposals_written(tmp_path):
    path = tmp_path / "figs" / "ar.png"
    curves = {
        "SST": (NUMBERS, [0.1, 0.3, 0.5, 0.6]),
        "MA-SST": [(NUMBERS, [0.1, 0.35, 0.55, 0.65]), (NUMBERS, [0.12, 0.3, 0.5, 0.7])],
    }
    plot_recall_vs_proposals(curves, path)
    assert _is_png(path)


def test_recall_vs_proposals_axes():
    fig = plot_recall_vs_proposals({"SST": (np.array([0.0, 1.0, 1000.0]), [0.0, 0.2, 0.6])})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_ylim() == (0.0, 1.0)
    assert ax.get_xlabel() == "average number of proposals" and ax.get_ylabel() == "average recall"
    assert ax.lines[0].get_xdata().tolist() == [1.0, 1000.0]  # N = 0 cannot be drawn on a log axis
    plt.close(fig)


def test_recall_vs_tiou_written_with_band(tmp_path):
    path = tmp_path / "tiou.png"
    seeds = [(TIOUS, np.linspace(1, 0.2, 20)), (TIOUS, np.linspace(1, 0.3, 20))]
    fig = plot_recall_vs_tiou({"SST": (TIOUS, np.linspace(1, 0.1, 20)), "MA-SST": seeds})
    ax = fig.axes[0]
    assert ax.get_ylabel() == "recall@1000 proposals" and ax.get_xlabel() == "tIoU"
    np.testing.assert_allclose(ax.lines[1].get_ydata(), np.linspace(1, 0.25, 20))  # the seeds' mean
    assert len(ax.collections) == 1  # one min-max band
    plt.close(fig)
    plot_recall_vs_tiou({"SST": (TIOUS, np.linspace(1, 0.1, 20))}, path)
    assert _is_png(path)


def test_bad_curves():
    with pytest.raises(ValueError, match="same x"):
        plot_recall_vs_tiou({"m": [(TIOUS, TIOUS), (TIOUS[:-1] + 0.01, TIOUS[:-1])]})
    with pytest.raises(ValueError, match="'m'"):
        plot_recall_vs_tiou({"m": (TIOUS, TIOUS[:3])})
    with pytest.raises(ValueError, match="non-empty"):
        plot_recall_vs_proposals({})
    plt.close("all")
