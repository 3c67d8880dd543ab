"""The Markdown report of an experiment suite: how it was produced (command, machine, versions,
sizes, load), the paper's claims next to the measured values, and one section per experiment
with its figures and the tables of raw metrics behind them."""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from skype.experiments.design import Section, fmt

GLOSSARY = [
    ("AMP", "mean engine time per arriving message (dissemination and buffer insertions), the engine's own clock"),
    ("EMP", "mean engine time per expiring message (buffer deletions and top-k re-evaluations), the engine's clock"),
    ("AMP+EMP", "engine time per message of a count window (each arrival expires one message)"),
    ("wall µs/msg", "wall time of the measured stream per message, Python overhead included"),
    ("re-evals /1000 msgs", "top-k re-evaluations from the message index (and threshold refreshes) per 1000 messages"),
    ("index steps /expiry", "message-index steps of those re-evaluations per expiring message (load-independent)"),
    ("avg buffer", "average number of messages buffered per subscription at the end of the run"),
    ("candidates /affected", "verified candidates per subscription whose buffer the message entered (1 is ideal)"),
    ("affected /msg", "subscriptions whose buffer an arriving message entered"),
    ("entries visited /msg", "posting entries the subscription index touched per message (load-independent)"),
    ("groups skipped /msg", "α-groups pruned whole per message"),
    ("index B/sub", "bytes of the subscription index and table per subscription"),
    ("subscribe s", "seconds to register all subscriptions into the full window (initial top-k from the message index)"),
    ("load 1m", "highest 1-minute load average of the machine seen at the start or end of the run"),
]


def _verdict(holds: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "n/a"}[holds]


def _bytes(n: int | None) -> str:
    return "unknown" if not n else f"{n / 2**30:.1f} GiB"


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def load_summary(doc: dict) -> str:
    loads = [v for m in doc["results"].values() for v in m.get("load_1m", []) if math.isfinite(v)]
    if not loads:
        return "not recorded"
    return f"min {min(loads):.2f}, median {statistics.median(loads):.2f}, max {max(loads):.2f}"


def _control_lines(doc: dict) -> list[str]:
    c = doc.get("control")
    if not c:
        return []
    a, b = c["first"], c["repeat"]

    def apart(key: str) -> str:
        return f"{abs(b[key] - a[key]) / a[key]:.0%}" if a[key] else "n/a"

    return [f"Timing noise: {c['label']} was measured again after the last run: AMP {fmt(a['amp_us'])} then "
            f"{fmt(b['amp_us'])} µs ({apart('amp_us')} apart), EMP {fmt(a['emp_us'])} then {fmt(b['emp_us'])} µs "
            f"({apart('emp_us')} apart); posting entries visited per message {fmt(a['entries_visited_per_msg'])} then "
            f"{fmt(b['entries_visited_per_msg'])}"" (the work does not depend on the load). Time ratios between systems within this noise are not "
            "meaningful.", ""]


def write_report(doc: dict, sections: Sequence[Section], path: Path, replot_command: str | None = None) -> Path:
    scale = doc["scale"]
    m = doc["machine"]
    measured_runs = len(doc["results"])
    planned_runs = len({json.dumps(e["spec"], sort_keys=True) for e in doc["plan"]})
    lines = ["# Skype: the paper's centralized experiments", ""]
    lines.append(f"Produced by `{doc['command']}`, started {doc['started']}, "
                 f"{_duration(doc.get('elapsed_s', 0.0))} for {measured_runs} distinct runs.")
    if replot_command:
        lines.append(f"Figures and report redrawn from `results.json` by `{replot_command}` on "
                     f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}.")
    if not doc.get("complete"):
        lines.append(f"**Incomplete**: {measured_runs} of {planned_runs} runs were measured; experiments with "
                     "missing runs are left out.")
    lines += ["", "## Machine and versions", "",
              "| CPU | cores | memory | platform | Python | numpy | matplotlib | tqdm | skype | git commit |",
              "|---|---|---|---|---|---|---|---|---|---|",
              f"| {m.get('cpu')} | {m.get('cores')} | {_bytes(m.get('memory_bytes'))} | {m.get('platform')} | "
              f"{m.get('python')} | {m.get('numpy')} | {m.get('matplotlib')} | {m.get('tqdm')} | {m.get('skype')} | "
              f"{m.get('git_commit', 'unknown')} |", "",
              f"Machine load during the runs (1-minute load average at each run's start and end): {load_summary(doc)}. "
              "Times measured under load are noisy; the work counters (entries visited, re-evaluations, index "
              "steps, buffer sizes) do not depend on it.", "",
              *_control_lines(doc),
              "## Sizes", "",
              f"{scale['num_subs']:,} subscriptions, a count window of {scale['window']:,} messages, "
              f"{scale['measured']:,} measured messages after the window is full and the subscriptions are registered "
              f"(in chunks of {scale['chunk']:,}), datasets {', '.join(scale['datasets'])} "
              f"(sweeps on {scale['datasets'][0]}), seed {scale['seed']}. The paper used 1M subscriptions, a 1M "
              "window and 100K measured messages; sweeps here scale around the default size as the paper's do "
              "around 1M.", ""]
    claims = [c for s in sections for c in s.claims]
    if claims:
        lines += ["## The paper's claims next to this run", "",
                  "| experiment | claim | paper | measured | holds? | criterion |", "|---|---|---|---|---|---|"]
        lines += [f"| {c.experiment} | {c.claim} | {c.paper} | {c.measured} | {_verdict(c.holds)} | {c.criterion} |"
                  for c in claims]
        held = sum(1 for c in claims if c.holds)
        judged = sum(1 for c in claims if c.holds is not None)
        lines += ["", f"{held} of {judged} judged claims hold at this size.", ""]
    for s in sections:
        lines += [f"## {s.title}", "", f"*The paper:* {s.paper}", ""]
        lines += [f"![{f}]({f})" for f in s.figures]
        lines.append("")
        for note in s.notes:
            lines += [note, ""]
        for t in s.tables:
            lines += [t.markdown(), ""]
    lines += ["## Metrics", ""]
    lines += [f"* **{name}**: {text}" for name, text in GLOSSARY]
    lines.append("")
    path.write_text("\n".join(lines))
    return path
