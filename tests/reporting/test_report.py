"""`mannlab report`: tables over fake run directories (no training), the paper's data, the
CLI, and the Table 2 recipes (they parse and build with every controller)."""

import json
import tomllib
from pathlib import Path

import pytest
import tomli_w

from mannlab.building import build_run
from mannlab.cli import main
from mannlab.config import load_config
from mannlab.errors import DataError
from mannlab.reporting.run_tables import (
    PAPER_COLUMNS,
    PAPER_TABLE2,
    bit_error_percent,
    build_report,
    error_table,
    find_runs,
    last_val_bce,
    runs_table,
)

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "table2"
PAPER_CONTROLLERS = ("fnn", "elman", "pnr-elman", "lstm", "pnr-lstm")


def rows(ber, multiple_first=1):
    """Validation rows as the loop writes them; the training-length row is multiple 1."""
    train = {"multiple": 1, "length": 20, "bce": 0.1, "bit_error_rate": ber, "seq_bit_errors": 1.0}
    longer = {"multiple": 2, "length": 40, "bce": 2.0, "bit_error_rate": 0.45, "seq_bit_errors": 9.0}
    return [train, longer] if multiple_first == 1 else [longer, train]


def fake_run(
    root,
    group,
    seed,
    model="ntm",
    controller="lstm",
    task="copy",
    ber=0.0,
    final_ber=0.3,
    best_rows=True,
    steps=1000,
    wall=100.0,
    solved=False,
    finished=True,
):
    """<root>/<group>/seed<seed>/ with config.toml and (if finished) summary.json."""
    run = Path(root) / group / f"seed{seed}"
    run.mkdir(parents=True)
    model_table = {"name": model, "controller_size": 8}
    if controller is not None:
        model_table["controller"] = controller
    config = {
        "seed": seed,
        "run_dir": str(run),
        "model": model_table,
        "task": {"name": task, "max_length": 20},
        "train": {"steps": steps},
    }
    (run / "config.toml").write_text(tomli_w.dumps(config))
    (run / "metrics.jsonl").write_text("")
    if finished:
        summary = {
            "model": model,
            "task": task,
            "seed": seed,
            "run_dir": str(run),
            "steps": steps,
            "configured_steps": steps,
            "wall_seconds": wall,
            "cpu_seconds": wall / 2,
            "solved": solved,
            "solved_at_step": None,
            "solved_at_seconds": None,
            "best_val": {
                "step": steps // 2,
                "bce": 0.1,
                "rows": rows(ber, multiple_first=2) if best_rows else None,
            },
            "final_val": rows(final_ber),
        }
        (run / "summary.json").write_text(json.dumps(summary))
    return run


def table_cells(text, label):
    """The cells of the first markdown row whose first cell is ``label``, keyed by header."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == label:
            return dict(zip(header, cells))
    raise AssertionError(f"no row {label!r} in\n{text}")


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    for seed, ber in enumerate([0.0, 0.1, 0.05]):  # 0 %, 10 %, 5 %: mean 5.0, one seed at 0
        fake_run(root, "ntm-lstm-copy", seed, ber=ber, wall=60.0 * (seed + 1))
    for seed in range(3):
        fake_run(root, "ntm-pnr-lstm-copy", seed, controller="pnr-lstm", ber=0.0, solved=True)
    fake_run(root, "ntm-lstm-reverse", 0, task="reverse", ber=0.25)
    fake_run(root, "ntm-lstm-reverse", 1, task="reverse", ber=0.0, best_rows=False, final_ber=0.125)
    fake_run(root, "dnc-lstm-copy", 0, model="dnc", ber=0.5, finished=False)  # still training
    fake_run(root, "dnc-lstm-copy", 1, model="dnc", ber=0.02)
    return root


def test_cells_are_mean_percent_and_seeds_at_zero(runs):
    found, warnings = find_runs(runs)
    assert len(found) == 10 and warnings == []
    table = error_table(found)
    copy = table_cells(table, "copy")
    assert copy["NTM lstm"] == "5.0 (1)"
    assert copy["NTM pnr-lstm"] == "0.0 (3)"
    assert copy["DNC lstm"] == "2.0 (0)"  # the unfinished seed is not averaged
    # seed 1 has no best-checkpoint rows: its last validation (12.5 %) is used
    assert table_cells(table, "reverse")["NTM lstm"] == "18.8 (0)"


def test_missing_runs_are_dashes_and_columns_follow_the_paper(runs):
    table = error_table(find_runs(runs)[0])
    header = table.splitlines()[0]
    assert header == "| task | NTM lstm | NTM pnr-lstm | DNC lstm |"
    reverse = table_cells(table, "reverse")
    assert reverse["NTM pnr-lstm"] == "-" and reverse["DNC lstm"] == "-"
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:]] == ["copy", "reverse"]


def test_bit_error_percent_picks_multiple_one_of_the_best_checkpoint():
    summary = {"best_val": {"rows": rows(0.0625, multiple_first=2)}, "final_val": rows(0.5)}
    assert bit_error_percent(summary) == pytest.approx(6.25)
    assert bit_error_percent({"best_val": {"rows": None}, "final_val": rows(0.5)}) == 50.0
    assert bit_error_percent({"best_val": {"rows": None}, "final_val": None}) is None


def test_controller_defaults_to_the_models_default(tmp_path):
    fake_run(tmp_path, "g", 0, controller=None, ber=0.0)  # config.toml without a controller key
    fake_run(tmp_path, "plain", 0, model="lstm", controller=None, ber=0.2)
    found, _ = find_runs(tmp_path)
    assert sorted(r.column for r in found) == [("lstm", None), ("ntm", "lstm")]
    assert error_table(found).splitlines()[0] == "| task | LSTM | NTM lstm |"


def test_a_method_switch_is_its_own_column(tmp_path):
    # D-NTM soft and REINFORCE, ARMIN and ARMIN with TARDIS reads: not pooled in one column
    fake_run(tmp_path, "soft", 0, model="dntm", controller=None, ber=0.1)
    reinforce = fake_run(tmp_path, "reinforce", 0, model="dntm", controller=None, ber=0.3)
    armin = fake_run(tmp_path, "armin", 0, model="armin", controller=None, ber=0.2)
    tardis_read = fake_run(tmp_path, "armin-tardis", 0, model="armin", controller=None, ber=0.4)
    for run, table in (
        (reinforce, {"addressing": "reinforce"}),
        (armin, {"read": "auto"}),
        (tardis_read, {"read": "tardis"}),
    ):
        config = tomllib.loads((run / "config.toml").read_text())
        config["model"].update(table)  # "auto" is ARMIN's default read
        (run / "config.toml").write_text(tomli_w.dumps(config))
    found, warnings = find_runs(tmp_path)
    assert sorted((r.column for r in found), key=str) == [
        ("armin", "read=tardis"),
        ("armin", None),
        ("dntm", "gru"),
        ("dntm", "gru, addressing=reinforce"),
    ]
    assert table_cells(error_table(found), "copy") == {
        "task": "copy",
        "armin": "20.0 (0)",
        "armin read=tardis": "40.0 (0)",
        "dntm gru": "10.0 (0)",
        "dntm gru, addressing=reinforce": "30.0 (0)",
    }


def test_runs_table_counts_seeds_steps_and_wall_time(runs):
    table = runs_table(find_runs(runs)[0], runs)
    lines = {
        tuple(c.strip() for c in line.strip("|").split("|")[:3]): line for line in table.splitlines()[2:]
    }
    ntm_lstm = [c.strip() for c in lines[("copy", "ntm", "lstm")].strip("|").split("|")]
    # seeds, seed ids, unfinished, steps, best step, solved, solved at, wall to solve,
    # unsolved last-10 bce, wall per seed, wall total, CPU per seed, directory
    assert ntm_lstm[3:] == [
        "3",
        "0, 1, 2",
        "0",
        "1000",
        "500",
        "0/3",
        "-",
        "-",
        "-",
        "2.0 min",
        "6.0 min",
        "60.0 s",
        "`ntm-lstm-copy`",
    ]
    dnc = [c.strip() for c in lines[("copy", "dnc", "lstm")].strip("|").split("|")]
    assert dnc[3:6] == ["1", "1", "1"]  # one finished (seed 1), one unfinished
    assert lines[("copy", "ntm", "pnr-lstm")].count("3/3") == 1


def write_validations(run, bces):
    """metrics.jsonl as the loop writes it: training rows, validation rows at two lengths."""
    lines = []
    for step, bce in enumerate(bces, 1):
        lines.append({"step": step, "split": "train", "loss": 9.0, "bce": 9.0, "wall": 1.0})
        lines.append({"step": step, "split": "val", "length": 20, "multiple": 1, "bce": bce, "wall": 1.0})
        lines.append({"step": step, "split": "val", "length": 40, "multiple": 2, "bce": 5.0, "wall": 1.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_runs_table_gives_the_armin_table1_figures(tmp_path):
    # solved runs: mean step and wall time of the solve; unsolved: mean of the last 10
    # validations at the training length (ARMIN paper, Table 1)
    for seed, at in ((0, 1000), (1, 3000)):
        run = fake_run(tmp_path, "armin-copy", seed, model="armin", controller=None, solved=True)
        summary = json.loads((run / "summary.json").read_text())
        summary.update(solved_at_step=at, solved_at_seconds=at / 10)
        (run / "summary.json").write_text(json.dumps(summary))
    for seed, bces in ((0, [0.9, 0.9] + [0.3] * 10), (1, [0.5] * 12)):
        write_validations(fake_run(tmp_path, "lstm-copy", seed, model="lstm", controller=None), bces)
    assert last_val_bce(tmp_path / "lstm-copy" / "seed0") == pytest.approx(0.3)
    assert last_val_bce(tmp_path / "armin-copy" / "seed0") is None  # no validations
    lines = {
        tuple(c.strip() for c in line.strip("|").split("|")[:2]): line
        for line in runs_table(find_runs(tmp_path)[0], tmp_path).splitlines()[2:]
    }
    armin = [c.strip() for c in lines[("copy", "armin")].strip("|").split("|")]
    lstm = [c.strip() for c in lines[("copy", "lstm")].strip("|").split("|")]
    assert armin[8:11] == ["2/2", "2000", "3.3 min"] and armin[11] == "-"
    assert lstm[8:12] == ["0/2", "-", "-", "0.400"]


def test_last_val_bce_names_a_malformed_line(tmp_path):
    run = fake_run(tmp_path, "g", 0)
    (run / "metrics.jsonl").write_text('{"split": "val", "bce": 0.1}\n{"split": "val", oops\n{}\n')
    with pytest.raises(DataError, match="line 2"):
        last_val_bce(run)


def test_paper_rows(runs):
    text = build_report(runs, paper=True)
    paper_copy = table_cells(text, "copy (paper)")
    assert paper_copy["NTM lstm"] == "11.0 (3)"
    assert paper_copy["NTM pnr-lstm"] == "0.0 (10)"
    assert paper_copy["DNC lstm"] == "13.2 (3)"
    assert table_cells(text, "reverse (paper)")["NTM pnr-lstm"] == "7.8 (3)"
    assert "(paper)" not in build_report(runs)


def test_paper_table_data():
    assert set(PAPER_TABLE2) == {
        "copy",
        "reverse",
        "bigram_flip",
        "odd_first",
        "repeat_copy",
        "priority_sort",
    }
    assert len(PAPER_COLUMNS) == 12
    for task, cells in PAPER_TABLE2.items():
        assert list(cells) == list(PAPER_COLUMNS)
        for mean, solved in cells.values():
            assert 0.0 <= mean <= 50.0 and 0 <= solved <= 10
            assert mean > 0.0 or solved > 0  # an average of 0.0 % needs solved models
    assert PAPER_TABLE2["copy"][("elman", None)] == (37.5, 0)
    assert PAPER_TABLE2["reverse"][("ntm", "pnr-elman")] == (15.2, 2)  # the paper's one exception
    assert PAPER_TABLE2["reverse"][("ntm", "elman")] == (2.0, 8)
    assert PAPER_TABLE2["odd_first"][("dnc", "fnn")] == (18.0, 0)
    # the paper's claim: a proposed controller gives the lowest average on every task
    for task, cells in PAPER_TABLE2.items():
        best = min(mean for mean, _ in cells.values())
        assert any(cells[(m, c)][0] == best for m in ("ntm", "dnc") for c in ("pnr-elman", "pnr-lstm"))
    assert min(PAPER_TABLE2["priority_sort"].values()) == (4.4, 0)


def test_pooled_directories_are_warned_about(tmp_path):
    fake_run(tmp_path / "table2", "ntm-lstm-copy", 0)
    fake_run(tmp_path / "table2-batched", "ntm-lstm-copy", 0)
    text = build_report(tmp_path)
    assert "Warnings:" in text and "pools runs of 2 directories" in text
    assert "seed 0 of copy / NTM lstm appears twice" in text


def test_summary_without_config_is_skipped_with_a_warning(tmp_path):
    fake_run(tmp_path, "ok", 0)
    lost = tmp_path / "lost" / "seed0"
    lost.mkdir(parents=True)
    (lost / "summary.json").write_text("{}")
    found, warnings = find_runs(tmp_path)
    assert len(found) == 1 and "summary.json without config.toml" in warnings[0]


# ------------------------------------------------------------- data-set runs


def fake_babi_eval(root, group, seed, errors, evaluated=True, controller="gru"):
    """A finished bAbI run under <root>/<group>/seed<seed> trained on the tasks of ``errors``,
    with its eval-test.json (errors per task)."""
    run = fake_run(root, group, seed, model="dntm", controller=controller, task="babi")
    config = tomllib.loads((run / "config.toml").read_text())
    config["task"]["tasks"] = sorted(errors)
    (run / "config.toml").write_text(tomli_w.dumps(config))
    if evaluated:
        per_group = {f"qa{n} name{n}": {"error": e, "examples": 1000} for n, e in errors.items()}
        overall = sum(errors.values()) / len(errors) if errors else None
        (run / "eval-test.json").write_text(
            json.dumps(
                {
                    "split": "test",
                    "task": "babi",
                    "per_group": per_group,
                    "error": overall,
                    "fail_threshold": 0.05,
                }
            )
        )
    return run


def test_babi_runs_get_a_test_error_table_per_task(tmp_path):
    # one model per task in one column (the D-NTM set-up), a joint model in another, 2 seeds
    for n, err in ((1, 0.0), (2, 0.30), (10, 0.04)):
        fake_babi_eval(tmp_path / "dntm", f"qa{n}", 0, {n: err})
    fake_babi_eval(tmp_path, "joint", 0, {1: 0.10, 10: 0.50}, controller="lstm")
    fake_babi_eval(tmp_path, "joint", 1, {1: 0.20, 10: 0.70}, controller="lstm")
    fake_babi_eval(tmp_path, "joint", 2, {1: 0.0, 10: 0.0}, evaluated=False, controller="lstm")
    (tmp_path / "lost").mkdir()
    (tmp_path / "lost" / "summary.json").write_text("{}")
    text = build_report(tmp_path)
    assert "summary.json without config.toml" in text
    assert "Bit error rates" not in text  # no toy-task runs: no Table 2 layout
    assert table_cells(text, "qa1 name1") == {"group": "qa1 name1", "`dntm`": "0.0", "`joint`": "15.0"}
    assert table_cells(text, "qa2 name2")["`joint`"] == "-"
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| qa")]
    assert rows == ["qa1 name1", "qa2 name2", "qa10 name10"]  # natural order
    assert table_cells(text, "**mean**") == {"group": "**mean**", "`dntm`": "11.3", "`joint`": "37.5"}
    assert table_cells(text, "failed (> 5 %)") == {
        "group": "failed (> 5 %)",
        "`dntm`": "1 of 3",
        "`joint`": "2 of 2",
    }
    assert "Not evaluated (1" in text and "joint/seed2" in text
    # reported from inside the per-task directory, the column is named after it
    inside = build_report(tmp_path / "dntm")
    assert table_cells(inside, "**mean**") == {"group": "**mean**", "`dntm`": "11.3"}


def test_each_task_gets_its_own_table_and_mnist_has_no_failed_row(tmp_path):
    fake_babi_eval(tmp_path, "babi", 0, {1: 0.5, 2: 0.1})
    run = fake_run(tmp_path, "pmnist", 0, model="lstm", controller=None, task="mnist")
    (run / "eval-test.json").write_text(
        json.dumps(
            {
                "task": "mnist",
                "error": 0.25,
                "per_group": {str(d): {"error": 0.2 + d / 100} for d in range(10)},
            }
        )
    )
    text = build_report(tmp_path)
    babi_part, mnist_part = text.split("## mnist")
    assert "## babi" in babi_part and table_cells(babi_part, "all examples")["`babi`"] == "30.0"
    assert table_cells(mnist_part, "9")["`pmnist`"] == "29.0"
    assert table_cells(mnist_part, "all examples")["`pmnist`"] == "25.0"
    assert "failed" not in mnist_part


def test_toy_and_data_runs_get_both_tables(tmp_path):
    fake_run(tmp_path, "ntm-lstm-copy", 0, ber=0.05)
    fake_babi_eval(tmp_path, "babi", 0, {1: 0.5})
    text = build_report(tmp_path)
    data_part, toy_part = text.split("# Bit error rates")
    assert table_cells(data_part, "qa1 name1")["`babi`"] == "50.0"
    assert table_cells(toy_part, "copy")["NTM lstm"] == "5.0 (0)"


def test_malformed_eval_file_is_a_data_error(tmp_path):
    run = fake_babi_eval(tmp_path, "babi", 0, {1: 0.5})
    (run / "eval-test.json").write_text("{not json")
    with pytest.raises(DataError, match="eval-test.json is truncated or not JSON"):
        build_report(tmp_path)


# ------------------------------------------------------------------------ CLI


def test_cli_prints_and_writes(runs, tmp_path, capsys):
    assert main(["report", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "| copy | 5.0 (1) | 0.0 (3) | 2.0 (0) |" in out
    assert f"report: written to {runs / 'report.md'}" in out
    assert (runs / "report.md").read_text() in out
    target = tmp_path / "docs" / "t2.md"
    assert main(["report", str(runs), "--paper", "--out", str(target)]) == 0
    assert "| copy (paper) | 11.0 (3) | 0.0 (10) | 13.2 (3) |" in target.read_text()
    # the written report.md is not a run: reporting again finds the same runs
    assert main(["report", str(runs)]) == 0
    # an existing directory as --out receives report.md
    assert main(["report", str(runs), "--out", str(tmp_path / "docs")]) == 0
    assert (tmp_path / "docs" / "report.md").read_text() == (runs / "report.md").read_text()


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for word in ("RUNS_DIR", "--out", "--paper", "summary.json", "config.toml", "37.5 (0)"):
        assert word in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "report" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: None, "runs directory not found"),
        (lambda root: root.mkdir(), "no runs in"),
        (
            lambda root: (fake_run(root, "g", 0) / "summary.json").write_text("{broken"),
            "truncated or not JSON",
        ),
    ],
)
def test_cli_user_errors_exit_2(tmp_path, capsys, make, message):
    root = tmp_path / "runs"
    make(root)
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(root)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# -------------------------------------------------------------- the recipes


def test_table2_recipes_cover_models_and_tasks():
    names = sorted(p.stem for p in RECIPES.glob("*.toml"))
    tasks = PAPER_TABLE2.keys()
    expected = sorted(f"{m}-{t}{v}" for m in ("ntm", "dnc") for t in tasks for v in ("", "-batched"))
    assert names == expected


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.toml")), ids=lambda p: p.stem)
def test_table2_recipe_parses_and_builds_with_every_controller(recipe):
    base = load_config(recipe)
    assert base.seeds == (0, 1, 2) and base.task in base.run_dir and base.model_args["controller"] == "lstm"
    assert base.model_args["controller_size"] == 128 and base.model_args["memory_slots"] == 128
    assert base.model_args["read_heads"] == (4 if base.task == "priority_sort" else 1)
    assert base.train.clip_grad_norm == 5.0 and base.train.momentum == 0.9
    if recipe.stem.endswith("-batched"):
        assert (
            base.train.batch_size,
            base.train.lr,
            base.train.lr_after_solve,
            base.train.val_every,
            base.train.steps,
        ) == (16, 3e-4, 3e-5, 100, 3000)
    else:
        assert (base.train.batch_size, base.train.lr, base.train.val_every) == (1, 1e-4, 1000)
    for controller in PAPER_CONTROLLERS:
        config = load_config(recipe, [f"model.controller={controller}"])
        task, model = build_run(config)
        assert model.cell.controller.hidden_size == 128
