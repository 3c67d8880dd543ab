"""``python -m skype.run partition-sim``: metrics, grids, the sweep's plot and tables, errors."""

import csv
import json

import pytest

from skype.partitioning import METHODS
from skype.run import main

TINY = ["--dataset", "tweets", "--num-subs", "200", "--num-messages", "1500", "--sample-size", "600",
        "--window", "300", "--batch-size", "250"]


def _run(*args):
    return main([str(a) for a in args])


def test_partition_sim_help_is_listed(capsys):
    with pytest.raises(SystemExit):
        _run("--help")
    assert "partition-sim" in capsys.readouterr().out


@pytest.mark.parametrize("method", METHODS)
def test_partition_sim_single_run_writes_the_metrics(tmp_path, method, capsys):
    out = tmp_path / "m.json"
    assert _run("partition-sim", *TINY, "--thresholds", "reference", "--method", method, "--partitions", 8,
                "--metrics-out", out) == 0
    m = json.loads(out.read_text())
    for key in ("replication_ratio", "communication_per_message", "load_imbalance", "route_us_per_message"):
        assert key in m and m[key] >= 0
    assert m["method"] == method and m["num_partitions"] == 8
    assert m["subscriptions"] == 200 and m["messages"] == 900
    assert 1.0 <= m["replication_ratio"] <= 8 and 0 < m["communication_per_message"] <= 8
    assert m["load_imbalance"] >= 1.0 and len(m["load_per_partition"]) == 8
    assert m["workload"]["threshold_engine"] == "reference" and m["workload"]["warmup_window"] == 300
    if method in ("hashing", "location"):
        assert m["communication_per_message"] == 8 and m["replication_ratio"] == 1
    assert method in capsys.readouterr().out


def test_partition_sim_grid_of_methods_and_partition_counts(tmp_path):
    out = tmp_path / "grid.json"
    assert _run("partition-sim", *TINY, "--thresholds", "kscore", "--method", "all", "--partitions", "4,6",
                "--metrics-out", out, "--table-out", tmp_path / "t.md") == 0
    m = json.loads(out.read_text())
    assert len(m["runs"]) == 2 * len(METHODS)
    assert {(r["method"], r["num_partitions"]) for r in m["runs"]} == {(a, p) for a in METHODS for p in (4, 6)}
    hyb = [r for r in m["runs"] if r["method"] == "spatial-first" and r["num_partitions"] == 6]
    assert hyb and hyb[0]["num_partitions"] == 6  # 2 x 3
    assert "Communication per message" in (tmp_path / "t.md").read_text()


def test_partition_sim_sweep_writes_plot_and_tables(tmp_path):
    png, table = tmp_path / "sweep.png", tmp_path / "sweep.md"
    assert _run("partition-sim", *TINY, "--thresholds", "none", "--sweep", "--plot-out", png,
                "--table-out", table) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    text = table.read_text()
    for p in (4, 8, 16, 32, 64, 128):
        assert f"P={p}" in text
    rows = list(csv.DictReader(open(tmp_path / "sweep.csv")))
    assert len(rows) == 6 * len(METHODS)
    assert {r["method"] for r in rows} == set(METHODS)


def test_partition_sim_from_files_and_time_window(tmp_path):
    msgs = [{"id": i, "x": float(i % 7), "y": 1.0, "t": float(i), "text": f"pizza place {i % 5} slice w{i % 11}"}
            for i in range(300)]
    subs = [{"id": j, "x": 1.0, "y": 1.0, "k": 3, "alpha": 0.3, "text": f"pizza w{j % 11}"} for j in range(40)]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(o) for o in msgs) + "\n")
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(o) for o in subs) + "\n")
    out = tmp_path / "m.json"
    assert _run("partition-sim", "--messages", tmp_path / "m.jsonl", "--subscriptions", tmp_path / "s.jsonl",
                "--sample-size", 100, "--window-seconds", 50, "--thresholds", "reference", "--method", "prefix",
                "--partitions", 4, "--metrics-out", out) == 0
    m = json.loads(out.read_text())
    assert m["subscriptions"] == 40 and m["messages"] == 200 and m["workload"]["warmup_window"] == 50


@pytest.mark.parametrize("args", [["--method", "magic"], ["--method", "spatial-first", "--partitions", "6", "--n1", "4"],
                                  ["--sample-size", "0"]])
def test_partition_sim_bad_arguments_fail_cleanly(args, capsys):
    assert _run("partition-sim", *TINY, "--thresholds", "none", *args) == 2
    assert "error:" in capsys.readouterr().err


def test_partition_sim_rejects_bad_partition_lists():
    with pytest.raises(SystemExit):
        _run("partition-sim", "--partitions", "4,x")
    with pytest.raises(SystemExit):
        _run("partition-sim", "--partitions", "0")


def test_policy_params_from_the_command_line():
    from skype.cli.partition_timeline import policy_param_arg, policy_params_for

    given = [policy_param_arg("horizon=1"), policy_param_arg("max_ops=4"), policy_param_arg("nope=true")]
    assert policy_params_for("ps2stream", given) == {"horizon": 1.0}
    assert policy_params_for("tornado", given) == {"horizon": 1.0, "max_ops": 4}
    assert policy_params_for("never", given) == {}
    assert policy_params_for("sstd", [policy_param_arg("cut=false")]) == {"cut": False}
    with pytest.raises(Exception):
        policy_param_arg("horizon")
