"""What an experiment of the suite is made of: its sizes, its runs, their outcome, and the pieces
of the report it returns.

* :class:`Scale`: the sizes of a suite run (subscriptions, window, measured messages, datasets).
* :class:`Run`: one measured configuration (a series label, an x value and a
  :class:`~skype.experiments.harness.RunSpec`); runs with equal specs (:func:`spec_key`) are
  measured once and shared between experiments.
* :class:`Outcome`: the (run, metrics) pairs an experiment gets back.
* :class:`Section`, :class:`Table`, :class:`Claim`: what an experiment's ``present`` returns for
  the report; :func:`metrics_table` and the ``fmt*`` helpers format the raw metrics.
* :class:`Experiment`: a name, the paper's statement, ``plan(scale)`` and ``present(outcome,
  out_dir, scale)``.  The experiments themselves are in :mod:`skype.experiments.suite`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from skype.experiments.harness import RunSpec

# ----------------------------------------------------------------------------- sizes and runs


@dataclass(frozen=True)
class Scale:
    """Sizes of a suite run.  Sweeps run on ``datasets[0]``; the main comparisons (systems,
    IGPT vs IPT vs CIQ, buffers, Table 4, alpha-groups) on every dataset."""

    num_subs: int
    window: int
    measured: int
    datasets: tuple[str, ...] = ("tweets", "geonames")
    seed: int = 0
    chunk: int = 1000

    @property
    def sweep_dataset(self) -> str:
        return self.datasets[0]

    def as_dict(self) -> dict:
        return {"num_subs": self.num_subs, "window": self.window, "measured": self.measured,
                "datasets": list(self.datasets), "seed": self.seed, "chunk": self.chunk}

    @classmethod
    def from_dict(cls, d: dict) -> Scale:
        return cls(d["num_subs"], d["window"], d["measured"], tuple(d["datasets"]), d["seed"], d["chunk"])


MEASURED_FRACTION = 0.5  # measured messages per window message when only sizes are given
DEFAULT_SCALE = Scale(num_subs=40_000, window=40_000, measured=20_000)
QUICK_SCALE = Scale(num_subs=1_500, window=1_500, measured=750, chunk=250)


@dataclass(frozen=True)
class Run:
    """One measured configuration of an experiment: a curve (``series``) and a point on it."""

    series: str
    x: Any
    spec: RunSpec

    @property
    def dataset(self) -> str:
        return self.spec.dataset

    @property
    def key(self) -> str:
        return spec_key(self.spec)


def spec_key(spec: RunSpec) -> str:
    return json.dumps(spec.as_dict(), sort_keys=True)


def spec_from_dict(d: dict) -> RunSpec:
    d = dict(d)
    d["params"] = tuple(d.get("params", {}).items())
    d["sub_terms"] = tuple(d["sub_terms"])
    return RunSpec(**d)


DEFAULT_KMAX = 60  # the paper's default
DEFAULT_SKYBAND_RATIO = 0.8  # our Skyband "sweet point" (the paper's value was lost)
DEFAULT_GROUPS = 10  # the paper's default


def system_spec(scale: Scale, dataset: str, index: str = "igpt", buffer: str = "cskyband", *,
                kmax: int = DEFAULT_KMAX, skyband_ratio: float = DEFAULT_SKYBAND_RATIO,
                groups: int = DEFAULT_GROUPS, **changes) -> RunSpec:
    """The spec of ``index``-``buffer`` at ``scale``; buffer parameters are spelled the same way
    everywhere, so that equal configurations share one run."""
    params: list[tuple[str, Any]] = []
    if buffer == "kmax":
        params.append(("kmax", kmax))
    if buffer == "skyband":
        params.append(("skyband_ratio", skyband_ratio))
    if groups != DEFAULT_GROUPS and index != "ciq":
        params.append(("groups", groups))
    base: dict[str, Any] = dict(dataset=dataset, num_subs=scale.num_subs, window=scale.window,
                                measured=scale.measured, seed=scale.seed, index=index, buffer=buffer,
                                params=tuple(params))
    base.update(changes)
    return RunSpec(**base)


SKYPE = "Skype (IGPT-cSkyband)"
CIQ_KMAX = "CIQ-Kmax"
SYSTEMS: dict[str, dict[str, Any]] = {SKYPE: dict(index="igpt", buffer="cskyband"),
                                      CIQ_KMAX: dict(index="ciq", buffer="kmax")}


class Outcome:
    """The measured runs of one experiment: (run, metrics) pairs."""

    def __init__(self, pairs: Sequence[tuple[Run, dict]]):
        self.pairs = list(pairs)

    def select(self, series: str | None = None, dataset: str | None = None) -> list[tuple[Run, dict]]:
        return [(r, m) for r, m in self.pairs
                if (series is None or r.series == series) and (dataset is None or r.dataset == dataset)]

    def one(self, series: str, x: Any = None, dataset: str | None = None) -> dict:
        for r, m in self.select(series, dataset):
            if x is None or r.x == x:
                return m
        raise KeyError((series, x, dataset))

    def curve(self, series: str, metric: str | Callable[[dict], float], dataset: str | None = None):
        """(xs, ys) of ``series`` ordered by x."""
        pts = sorted(self.select(series, dataset), key=lambda p: p[0].x)
        get = metric if callable(metric) else (lambda m: m[metric])
        return [r.x for r, _ in pts], [get(m) for _, m in pts]

    def series(self) -> list[str]:
        return list(dict.fromkeys(r.series for r, _ in self.pairs))

    def datasets(self) -> list[str]:
        return list(dict.fromkeys(r.dataset for r, _ in self.pairs))


# ----------------------------------------------------------------------------- report pieces


@dataclass
class Claim:
    """A claim of the paper next to the measured value; ``holds`` is None when it cannot be
    judged from this run."""

    experiment: str
    claim: str
    paper: str
    measured: str
    holds: bool | None
    criterion: str


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        out = [f"**{self.title}**", "", "| " + " | ".join(self.headers) + " |",
               "|" + "|".join("---" for _ in self.headers) + "|"]
        out += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(out)


@dataclass
class Section:
    name: str
    title: str
    paper: str
    figures: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    paper: str  # what the paper shows and says (spec §6.1)
    plan: Callable[[Scale], list[Run]]
    present: Callable[[Outcome, Path, Scale], Section]
    figures: tuple[str, ...]


def fmt(v: float | None) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def fmt_ratio(r: float) -> str:
    return "n/a" if not math.isfinite(r) else f"{r:.1f}x"


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Rank correlation of two equally long sequences (ties broken by position)."""
    if len(xs) < 2:
        return float("nan")

    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r

    rx, ry = ranks(list(xs)), ranks(list(ys))
    n = len(xs)
    mean = (n - 1) / 2
    num = sum((a - mean) * (b - mean) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mean) ** 2 for a in rx) * sum((b - mean) ** 2 for b in ry))
    return num / den if den else float("nan")


def total_us(m: dict) -> float:
    """Engine time per message of a count window: one arrival and one expiry."""
    return m["amp_us"] + m["emp_us"]


# Columns of the raw-metrics tables: header, value of (run, metrics).
COLUMNS: dict[str, tuple[str, Callable[[Run, dict], str]]] = {
    "dataset": ("dataset", lambda r, m: r.dataset),
    "system": ("system", lambda r, m: r.series),
    "amp": ("AMP (µs)", lambda r, m: fmt(m["amp_us"])),
    "emp": ("EMP (µs)", lambda r, m: fmt(m["emp_us"])),
    "dissem": ("dissemination µs /arrival", lambda r, m: fmt(m.get("disseminate_us", float("nan")))),
    "admit": ("admissions µs /arrival", lambda r, m: fmt(m.get("admit_us", float("nan")))),
    "total": ("AMP+EMP (µs)", lambda r, m: fmt(total_us(m))),
    "wall": ("wall µs/msg", lambda r, m: fmt(m["us_per_msg"])),
    "reevals": ("re-evals /1000 msgs", lambda r, m: fmt(m["reevals_per_1000"])),
    "reeval_work": ("index steps /expiry", lambda r, m: fmt(m.get("reeval_work_per_expiry", float("nan")))),
    "buffer": ("avg buffer", lambda r, m: fmt(m["avg_buffer_size"])),
    "candidates": ("candidates /affected", lambda r, m: fmt(m["candidates_per_affected"])),
    "affected": ("affected /msg", lambda r, m: fmt(m["affected_per_msg"])),
    "entries": ("entries visited /msg", lambda r, m: fmt(m.get("entries_visited_per_msg", float("nan")))),
    "groups_skipped": ("groups skipped /msg", lambda r, m: fmt(m.get("groups_skipped_per_msg", float("nan")))),
    "index": ("index B/sub", lambda r, m: fmt(m["index_bytes_per_sub"])),
    "subscribe": ("subscribe s", lambda r, m: fmt(m.get("subscribe_s", float("nan")))),
    "load": ("load 1m", lambda r, m: fmt(max(m.get("load_1m", [float("nan")])))),
}


def metrics_table(title: str, outcome: Outcome, x_header: str | None, columns: Sequence[str],
                  pairs: Sequence[tuple[Run, dict]] | None = None) -> Table:
    pairs = outcome.pairs if pairs is None else pairs
    lead = [c for c in columns if c in ("dataset", "system")]
    rest = [c for c in columns if c not in ("dataset", "system")]
    headers = [COLUMNS[c][0] for c in lead] + ([x_header] if x_header else []) + [COLUMNS[c][0] for c in rest]
    rows = []
    for r, m in pairs:
        row = [COLUMNS[c][1](r, m) for c in lead]
        if x_header:
            row.append(str(r.x))
        row += [COLUMNS[c][1](r, m) for c in rest]
        rows.append(row)
    return Table(title, headers, rows)
