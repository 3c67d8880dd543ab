"""Run the experiment suite: measure every distinct run once, save the raw results as JSON, draw
the figures and write the Markdown report.

``run_suite`` measures (with tqdm bars on stderr: one over the runs, one over each run's
messages) and writes ``results.json`` after every run, so that an interrupted suite keeps what it
measured; ``replot`` rebuilds the figures and the report from ``results.json`` alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from skype.errors import SkypeError
from skype.experiments.harness import RunSpec, measure
from skype.experiments.report import write_report
from skype.experiments.design import Outcome, Run, Scale, Section, spec_from_dict
from skype.experiments.suite import EXPERIMENTS

RESULTS_FILE = "results.json"
REPORT_FILE = "report.md"
FORMAT = 1


def plan(names: Sequence[str], scale: Scale) -> list[tuple[str, Run]]:
    """(experiment name, run) for every run of the named experiments."""
    return [(name, run) for name in names for run in EXPERIMENTS[name].plan(scale)]


def _workload_order(spec) -> tuple:
    # runs that share a generated workload are measured one after the other (the cache hits)
    return (spec.dataset, spec.num_subs, spec.window or 0, spec.window_seconds or 0.0, spec.sub_terms, spec.k,
            spec.sub_keywords, spec.seed)


def machine_facts() -> dict:
    """CPU, cores, memory and versions (``skype.report.machine_info``), plus matplotlib, tqdm
    and the git commit of the checkout."""
    import matplotlib
    import tqdm

    from skype.report import machine_info

    info = machine_info()
    info["matplotlib"] = matplotlib.__version__
    info["tqdm"] = tqdm.__version__
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if commit:
            info["git_commit"] = commit + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def _load_1m() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def run_suite(names: Sequence[str], scale: Scale, out_dir: Path, *, command: str,
              progress: bool | None = None) -> dict:
    """Measure the named experiments at ``scale``; writes ``results.json``, the figures and
    ``report.md`` into ``out_dir`` and returns the results document."""
    from tqdm import tqdm

    from skype.report import progress_bar

    out_dir.mkdir(parents=True, exist_ok=True)
    planned = plan(names, scale)
    unique: dict[str, RunSpec] = {}
    for _, run in planned:
        unique.setdefault(run.key, run.spec)
    order = sorted(unique, key=lambda k: _workload_order(unique[k]))
    doc: dict[str, Any] = {
        "format": FORMAT, "command": command, "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_facts(), "scale": scale.as_dict(), "experiments": list(names),
        "plan": [{"experiment": e, "series": r.series, "x": r.x, "spec": r.spec.as_dict()} for e, r in planned],
        "results": {}, "complete": False,
    }
    t_start = time.perf_counter()
    disable = (not sys.stderr.isatty()) if progress is None else (not progress)
    overall = tqdm(total=len(order), desc="experiments", unit="run", file=sys.stderr, disable=disable,
                   dynamic_ncols=True, position=0)
    try:
        for key in order:
            spec = unique[key]
            where = ", ".join(sorted({e for e, r in planned if r.key == key}))
            bar = progress_bar(total=spec.measured, desc=f"{spec.label} {spec.dataset} [{where}]", enabled=progress)
            bar.leave = False
            bar.set_postfix_str("setup: workload, subscriptions")
            load_before = _load_1m()
            t0 = time.perf_counter()
            try:
                metrics = measure(spec, chunk=scale.chunk, progress=bar.update, trace=True,
                                  on_start=lambda n, bar=bar: _set_total(bar, n))
            finally:
                bar.close()
            metrics["run_s"] = time.perf_counter() - t0
            metrics["load_1m"] = [load_before, _load_1m()]
            doc["results"][key] = metrics
            doc["elapsed_s"] = time.perf_counter() - t_start
            _write_json(out_dir / RESULTS_FILE, doc)
            overall.update(1)
        if order:
            doc["control"] = _control_repeat(doc, unique, order, scale, progress)
    finally:
        overall.close()
    doc["complete"] = True
    doc["elapsed_s"] = time.perf_counter() - t_start
    doc["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    _write_json(out_dir / RESULTS_FILE, doc)
    write_outputs(doc, out_dir)
    return doc


CONTROL_METRICS = ("amp_us", "emp_us", "us_per_msg", "reevals_per_1000", "avg_buffer_size", "entries_visited_per_msg")


def _control_repeat(doc: dict, unique: dict, order: list[str], scale: Scale, progress: bool | None) -> dict:
    """Measure Skype's default run once more at the end: how far two measurements of one
    configuration lie apart on this machine at this time (the noise of the timings)."""
    from skype.report import progress_bar
    from skype.experiments.design import spec_key, system_spec

    key = spec_key(system_spec(scale, scale.sweep_dataset))
    if key not in unique:
        key = order[0]
    spec = unique[key]
    bar = progress_bar(total=spec.measured, desc=f"control: {spec.label} {spec.dataset} again", enabled=progress)
    bar.leave = False
    load_before = _load_1m()
    try:
        again = measure(spec, chunk=scale.chunk, progress=bar.update, on_start=lambda n: _set_total(bar, n))
    finally:
        bar.close()
    first = doc["results"][key]
    return {"key": key, "label": f"{spec.label} on {spec.dataset}",
            "first": {m: first[m] for m in CONTROL_METRICS}, "repeat": {m: again[m] for m in CONTROL_METRICS},
            "load_1m": [load_before, _load_1m()]}


def _set_total(bar, total: int) -> None:
    bar.total = total
    bar.set_postfix_str("measuring")


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    tmp.replace(path)


def load_results(out_dir: Path) -> dict:
    path = out_dir / RESULTS_FILE
    if not path.exists():
        raise SkypeError(f"nothing to re-plot: {path} does not exist (run the experiments into {out_dir} first)")
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT:
        raise SkypeError(f"{path} has format {doc.get('format')!r}; this version reads format {FORMAT}")
    return doc


def sections(doc: dict, out_dir: Path, names: Sequence[str] | None = None) -> list[Section]:
    """Draw the figures and build the report sections of ``doc``'s experiments (or of
    ``names`` among them)."""
    scale = Scale.from_dict(doc["scale"])
    wanted = [n for n in doc["experiments"] if names is None or n in names]
    out = []
    for name in wanted:
        pairs = []
        for entry in doc["plan"]:
            if entry["experiment"] != name:
                continue
            run = Run(entry["series"], entry["x"], spec_from_dict(entry["spec"]))
            metrics = doc["results"].get(run.key)
            if metrics is not None:
                pairs.append((run, metrics))
        planned = sum(1 for e in doc["plan"] if e["experiment"] == name)
        if len(pairs) < planned:  # an interrupted suite: report what was measured
            continue
        out.append(EXPERIMENTS[name].present(Outcome(pairs), out_dir, scale))
    return out


def write_outputs(doc: dict, out_dir: Path, names: Sequence[str] | None = None,
                  replot_command: str | None = None) -> Path:
    secs = sections(doc, out_dir, names)
    return write_report(doc, secs, out_dir / REPORT_FILE, replot_command=replot_command)


def replot(out_dir: Path, names: Sequence[str] | None = None, command: str | None = None) -> Path:
    """Redraw the figures and rewrite the report from ``out_dir/results.json``."""
    doc = load_results(out_dir)
    unknown = [n for n in (names or ()) if n not in doc["experiments"]]
    if unknown:
        from skype.errors import invalid_choice

        raise invalid_choice("experiment in this results file", unknown[0], doc["experiments"])
    return write_outputs(doc, out_dir, names, replot_command=command)
