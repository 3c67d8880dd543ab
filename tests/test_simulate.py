"""The library driver (:mod:`skype.simulate`): the same run as the command line, the core equal to
the reference through it, and one set of defaults shared by the library and the command line."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skype import simulate
from skype.dskype.plan import RunSettings
from skype.model import DEFAULT_BOUNDS
from skype.run import build_parser, main


def _results(path) -> list:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def test_the_library_run_writes_what_the_command_line_writes(tmp_path):
    """``simulate.run`` with a mapping and ``python -m skype.run simulate`` with the same options:
    the same final results and result changes, byte for byte."""
    argv = ["--dataset", "geonames", "--num-subs", "400", "--num-messages", "1500", "--window", "500",
            "--seed", "4", "--fill-window", "--turnover", "0.5"]
    assert main(["simulate", *argv, "--results-out", str(tmp_path / "cli.jsonl"),
                 "--changes-out", str(tmp_path / "cli.changes"), "--no-progress"]) == 0
    run = simulate.run({"dataset": "geonames", "num_subs": 400, "num_messages": 1500, "window": 500, "seed": 4,
                        "fill_window": True, "turnover": 0.5, "results_out": str(tmp_path / "lib.jsonl"),
                        "changes_out": str(tmp_path / "lib.changes")})
    assert (tmp_path / "lib.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert (tmp_path / "lib.changes").read_bytes() == (tmp_path / "cli.changes").read_bytes()
    assert run.metrics["result_changes"] > 0 and (tmp_path / "cli.changes").stat().st_size > 0
    assert run.metrics["engine"] == "core (cone, cskyband)" and run.metrics["window"] == 500


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 50), window=st.integers(20, 400), fill=st.booleans(),
       batch=st.sampled_from([1, 7, 1000]), buffer=st.sampled_from(["cskyband", "kmax", "exact"]))
def test_the_core_equals_the_reference_through_the_driver(seed, window, fill, batch, buffer):
    """Random workloads and windows, the paper's protocol or not: the core's final results and
    result-change count through :func:`simulate.run` are the brute-force reference's."""
    options = {"dataset": "tweets", "num_subs": 60, "num_messages": 500, "seed": seed, "window": window,
               "fill_window": fill, "batch_size": batch, "buffer": buffer}
    core = simulate.run(options)
    ref = simulate.run(dict(options, engine="reference"))
    assert list(core.engine.results_by_kind()) == list(ref.engine.results_by_kind())
    assert core.metrics["messages"] == ref.metrics["messages"]
    assert core.metrics["result_changes"] == ref.metrics["result_changes"]


def test_settings_come_in_four_groups_with_the_command_lines_defaults():
    parsed = vars(build_parser().parse_args(["simulate"]))
    assert simulate.SimulateSettings.from_options(parsed) == simulate.SimulateSettings.from_options(
        {"progress": None})
    s = simulate.SimulateSettings.from_options({"kmax": 7, "window_seconds": 3.5, "results_out": "r.jsonl",
                                                "batch_size": 9, "num_subs": 11, "not_an_option": 1})
    assert (s.engine.kmax, s.sink.results_out, s.control.batch_size, s.source.num_subs) == (7, "r.jsonl", 9, 11)
    assert s.engine.window_spec == {"window_seconds": 3.5}
    assert simulate.window_of({}) == {"window": simulate.DEFAULT_WINDOW}
    assert "registration" not in simulate.engine_options({})               # the default stays out of plans
    assert simulate.engine_options({"registration": "replay"})["registration"] == "replay"


def test_run_settings_from_options_are_the_command_lines():
    """``RunSettings.from_options`` of the parsed ``distributed`` options equals the one of the bare
    mapping with the same values: the library's defaults are the command line's."""
    parsed = vars(build_parser().parse_args(["distributed", "--partitions", "3", "--method", "location,prefix",
                                             "--window-seconds", "40", "--kmax", "9", "--commands-per-batch", "5"]))
    bare = {"partitions": 3, "method": ("location", "prefix"), "window_seconds": 40.0, "kmax": 9,
            "commands_per_batch": 5}
    a, b = RunSettings.from_options(parsed, DEFAULT_BOUNDS), RunSettings.from_options(bare, DEFAULT_BOUNDS)
    assert a == b
    d = a.distribution
    assert (d.window_kind, d.window_size, d.merge_buckets, d.engine_options["kmax"]) == ("time", 40.0, 3, 9)
    assert (a.control.commands_per_batch, a.source.kind, a.sink.kind) == (5, "files", "files")
    assert RunSettings.from_options(vars(build_parser().parse_args(["distributed"])), DEFAULT_BOUNDS) == \
        RunSettings.from_options({}, DEFAULT_BOUNDS)


def test_load_inputs_takes_options_and_refuses_bad_records_once(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"id": 1, "x": 1.0, "y": 2.0, "terms": {"a": 1.0}}\n{"id": 2, "x": "nope", "y": 2.0}\n')
    inputs = simulate.load_inputs({"messages": str(path), "num_subs": 3, "on_error": "skip"})
    assert sum(inputs.rejected.values()) == 1
    with pytest.raises(Exception, match="E0"):
        simulate.load_inputs({"messages": str(path), "num_subs": 3})
