"""The experiment suite (``python -m skype.run experiments``): a quick run writes the JSON
results, every figure and a report with the machine, the claims and each experiment's tables;
``--only`` measures a subset; ``--replot`` redraws from the JSON alone; bad names are rejected."""

import json

import pytest

from skype.errors import InputError, SkypeError
from skype.experiments.harness import RunSpec, measure, prepare, publish_paired, summarize_trace
from skype.experiments.design import QUICK_SCALE, Scale, spearman, spec_key
from skype.experiments.suite import EXPERIMENTS, plan_dissemination
from skype.run import main

EXPECTED_FIGURES = {"fig10_kmax_skyband.png", "fig12_groups.png", "fig12_ipt_igpt.png", "fig13_igpt_ciq.png",
                    "fig14_emp.png", "fig16_keywords.png", "fig16_k.png", "fig18_subscriptions.png",
                    "fig18_window.png", "fig20_zipf.png", "fig20_time_window.png"}
TABLE_TITLES = ["kmax, Skyband ratio and cSkyband", "AMP against the number of α-groups", "IPT and IGPT",
                "IGPT and CIQ with the cSkyband and Kmax buffers", "Table 4: average buffer size",
                "Keywords per subscription", "**k**", "Number of subscriptions", "Window size",
                "Subscription keywords drawn from messages or from a Zipf law", "Time window of"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("experiments")
    assert main(["experiments", "--quick", "--size", "600", "--measured", "300", "--out", str(out),
                 "--no-progress"]) == 0
    return out


def test_quick_run_writes_results_report_and_every_figure(quick_run):
    doc = json.loads((quick_run / "results.json").read_text())
    assert doc["complete"] is True
    assert doc["experiments"] == list(EXPERIMENTS)
    assert doc["scale"]["num_subs"] == 600 and doc["scale"]["window"] == 600 and doc["scale"]["measured"] == 300
    planned = {json.dumps(e["spec"], sort_keys=True) for e in doc["plan"]}
    assert set(doc["results"]) == planned  # every distinct run measured, once
    for metrics in doc["results"].values():
        # a time window measures the stream after its first window_seconds (about 300 messages)
        if metrics["spec"]["window"] is not None:
            assert metrics["messages"] == 300
        else:
            assert 200 <= metrics["messages"] <= 500
        assert metrics["amp_us"] > 0 and metrics["avg_buffer_size"] >= 0
        if metrics["spec"]["engine"] == "core":  # the phase clocks: the index's part and the admissions' part of AMP
            assert 0 < metrics["disseminate_us"] < metrics["amp_us"]
            assert 0 <= metrics["admit_us"] < metrics["amp_us"]
        assert sum(row["messages"] for row in metrics["trace"]) == metrics["messages"]
    declared = {f for e in EXPERIMENTS.values() for f in e.figures}
    assert EXPECTED_FIGURES <= declared
    for name in declared:
        assert (quick_run / name).read_bytes()[:8] == PNG_MAGIC, name
    report = (quick_run / "report.md").read_text()
    machine = doc["machine"]
    for fact in (machine["cpu"], f"| {machine['cores']} |", machine["python"], machine["numpy"],
                 machine["matplotlib"], "python -m skype.run experiments --quick --out"):
        assert str(fact) in report
    for title in TABLE_TITLES:
        assert title in report, title
    for name in declared:
        assert f"]({name})" in report
    assert "## The paper's claims next to this run" in report
    assert "IGPT about 10x faster than CIQ in AMP (tweets, cSkyband)" in report
    assert "dissemination alone" in report and "dissemination µs /arrival" in report


def test_quick_run_shares_equal_runs_between_experiments(quick_run):
    doc = json.loads((quick_run / "results.json").read_text())
    assert len(doc["results"]) < len(doc["plan"])
    skype_tweets = [e for e in doc["plan"] if e["spec"]["dataset"] == "tweets" and e["spec"]["index"] == "igpt"
                    and e["spec"]["buffer"] == "cskyband" and e["spec"]["params"] == {}
                    and e["spec"]["num_subs"] == 600 and e["spec"]["window"] == 600 and e["spec"]["k"] == 20
                    and e["spec"]["sub_terms"] == [1, 3] and e["spec"]["sub_keywords"] == "message"]
    experiments = {e["experiment"] for e in skype_tweets}
    assert {"tuning", "groups", "pruning", "dissemination", "reevaluation", "k", "subscriptions", "window",
            "zipf"} <= experiments
    assert len({json.dumps(e["spec"], sort_keys=True) for e in skype_tweets}) == 1


def test_replot_redraws_from_json_alone(quick_run):
    for png in quick_run.glob("*.png"):
        png.unlink()
    (quick_run / "report.md").unlink()
    assert main(["experiments", "--replot", "--out", str(quick_run)]) == 0
    report = (quick_run / "report.md").read_text()
    assert "redrawn from `results.json` by `python -m skype.run experiments --replot" in report
    assert "python -m skype.run experiments --quick" in report  # the measuring command is kept
    assert {p.name for p in quick_run.glob("*.png")} == {f for e in EXPERIMENTS.values() for f in e.figures}


def test_only_measures_the_named_experiments(tmp_path):
    assert main(["experiments", "--quick", "--only", "pruning,dissemination", "--size", "400", "--measured", "200",
                 "--datasets", "geonames", "--out", str(tmp_path), "--no-progress"]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["experiments"] == ["pruning", "dissemination"]
    assert {e["spec"]["dataset"] for e in doc["plan"]} == {"geonames"}
    assert {(e["spec"]["index"], e["spec"]["buffer"]) for e in doc["plan"]} == {
        ("igpt", "cskyband"), ("ipt", "cskyband"), ("ciq", "cskyband"), ("igpt", "kmax"), ("ciq", "kmax")}
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["fig12_ipt_igpt.png", "fig13_igpt_ciq.png"]
    report = (tmp_path / "report.md").read_text()
    assert "IPT and IGPT" in report and "Table 4" not in report
    # --replot --only redraws a subset of what the file holds
    assert main(["experiments", "--replot", "--only", "pruning", "--out", str(tmp_path)]) == 0
    assert "IGPT and CIQ" not in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("args, code", [
    (["--only", "fig99"], "E022"), (["--datasets", "yelp"], "E022"), (["--size", "0"], "E023"),
])
def test_bad_arguments_are_rejected_with_their_code(tmp_path, capsys, args, code):
    assert main(["experiments", "--quick", "--out", str(tmp_path), *args]) == 2
    assert f"[{code}]" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()


def test_replot_without_results_fails_clearly(tmp_path, capsys):
    assert main(["experiments", "--replot", "--out", str(tmp_path)]) == 2
    assert "results.json does not exist" in capsys.readouterr().err


def test_replot_of_an_experiment_the_file_lacks_is_rejected(tmp_path):
    from skype.experiments import runner

    runner.run_suite(["pruning"], Scale(300, 300, 100, ("tweets",), chunk=50), tmp_path, command="test")
    with pytest.raises(InputError) as err:
        runner.replot(tmp_path, ["window"])
    assert err.value.code == "E022"
    with pytest.raises(SkypeError):
        runner.load_results(tmp_path / "elsewhere")


def test_trace_phases_add_up_to_the_whole_run():
    spec = RunSpec(num_subs=300, window=400, measured=400, seed=3)
    m = measure(spec, chunk=100, trace=True)
    assert [row["messages"] for row in m["trace"]] == [100] * 4
    whole = summarize_trace(m["trace"])
    assert whole["messages"] == m["messages"] == 400
    assert whole["amp_us"] == pytest.approx(m["amp_us"], rel=1e-6)
    assert whole["emp_us"] == pytest.approx(m["emp_us"], rel=1e-6)
    assert whole["reevals_per_1000"] == pytest.approx(m["reevals_per_1000"])
    assert whole["avg_buffer_size"] == pytest.approx(m["avg_buffer_size"])
    first, rest = summarize_trace(m["trace"], 0, 1), summarize_trace(m["trace"], 1)
    assert first["messages"] + rest["messages"] == 400


def test_buffer_parameters_are_spelled_one_way_so_runs_are_shared():
    scale = QUICK_SCALE
    keys = {r.series: spec_key(r.spec) for r in plan_dissemination(scale) if r.dataset == "tweets"}
    tuning = {(r.series, r.x): spec_key(r.spec) for r in EXPERIMENTS["tuning"].plan(scale)}
    assert tuning[("IGPT-Kmax", 60)] == keys["IGPT-Kmax"]
    assert tuning[("IGPT-cSkyband", "default")] == keys["IGPT-cSkyband"]
    groups = {(r.dataset, r.x): spec_key(r.spec) for r in EXPERIMENTS["groups"].plan(scale)}
    assert groups[("tweets", 10)] == keys["IGPT-cSkyband"] != groups[("tweets", 20)]


def test_spearman_sees_rising_falling_and_flat_curves():
    assert spearman([1, 2, 3, 4], [1, 5, 7, 9]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [9, 7, 5, 1]) == pytest.approx(-1.0)
    assert abs(spearman([1, 2, 3, 4], [2, 9, 1, 8])) < 0.8


def test_publish_paired_rotates_the_engines_and_refuses_different_changes():
    """The benches' paired A/B (``publish_paired``): two engines of the same configuration agree
    chunk by chunk and each gets its CPU time; an engine whose results differ (another k) is named."""
    spec = RunSpec(num_subs=300, window=300, measured=200, index="cone")
    a, b, c, other = prepare(spec), prepare(spec), prepare(spec), prepare(spec.with_(k=3))
    msgs = a.workload.messages
    assert a.turn_over(50, chunk=20) == b.turn_over(50) == 350 == a.start      # unmeasured, then measured
    cpu = publish_paired({"a": a.engine, "b": b.engine}, msgs, a.start, 150, 50)
    assert set(cpu) == {"a", "b"} and all(t >= 0 for t in cpu.values())
    assert a.engine.stats()["arrivals"] == b.engine.stats()["arrivals"] == 500
    with pytest.raises(SkypeError, match="chunk 0: other's result changes differ from c's"):
        publish_paired({"c": c.engine, "other": other.engine}, msgs, c.start, 200, 50)
