"""The sizing projection: throughput, executor memory and executor count of a DSkype run.

Fitted on measured figures only: per-partition costs from :mod:`skype.sizing.partitions` (in
process, at a few subscription counts N and partition counts P, one window W and batch size B)
and the fixed cost of a batch from Spark runs whose engines do next to nothing.

**Time of a micro-batch** of B messages, P partitions on K cores (one task per core at a time)::

    T(N, P, K) = F(P, K) + B * (r + stage(busy(N, P), sum(N, P), K) + stage(mbusy(N, P), msum(N, P), K)
                                + e * reports(N, P) / min(P, K))
    stage(busy, total, K) = max(busy, total / K)          # the slowest task, or the cores' share
    throughput = B / T

* ``busy(N, P)``: the busiest partition's CPU seconds per message in ``apply`` (engine, reports,
  window share), ``sum`` the same summed over the partitions; ``mbusy``/``msum`` the merge
  buckets' (replicated methods; 0 otherwise); ``r`` the routing seconds per message.  Each is
  fitted per method and measured P as ``a + b * N`` (least squares over the measured N): ``a``
  is what a message costs whatever the subscriptions (its window share, the batch's bookkeeping),
  ``b`` what grows with the subscriptions (postings, admissions, reports).  Routing is the mean
  over the measured N (a message is routed by the method's tables, whatever N).
* Beyond the largest measured P (``P0``) the subscription part divides and the message part does
  not: ``busy(N, P) = a(P0) + b(P0) * N * P0 / P`` and ``sum(N, P) = a_sum(P0) * P / P0 + b_sum(P0) * N``.
  This keeps the measured imbalance at ``P0`` and, for a method that replicates more as P grows
  (``prefix``), underestimates its replicas (the guide says so).
* ``F(P, K) = f0 + f_task * P / K``: a batch's fixed cost (planning, offsets, commits, the sink)
  plus each task's overhead, in core-seconds, spread over the cores.  ``f0`` and ``f_task`` come
  from two Spark runs (P = 1 and P = P1) of a workload with ~no engine work (K = 2 here).
* The reports a partition sends (the result changes) become events the Spark tasks write:
  ``B * e * reports(N, P) / min(P, K)`` more seconds per batch, with ``reports`` the report bytes
  per message (all partitions, fitted like the times) and ``e`` seconds per byte, fitted on one
  measured Spark run (:func:`event_cost`; 0 when not fitted).
* The costs hold at the measured window W and batch size B: a larger window admits fewer
  messages per subscription, a larger batch spreads a partition's per-batch bookkeeping (both
  make the projection conservative, not exact).

**Memory of a partition**: ``m0 + m_rep * replicas + m_win * window_share + B * reports(N) / P``
bytes (the last: one batch's result changes, held once), with
``m_win`` the engine's own accounting per window-share message (window + message index) and
``m_rep`` fitted on the measured processes' resident-set growth against the replicas they
hosted (their peak, registration's transient buffers included, where measured), and ``m0`` an idle engine host's resident set (its interpreter and libraries) (a replica is one subscription on one partition: the engine's index and top-k buffers,
the partition's record of it, the allocator's overhead).  An executor of C cores runs C
partitions: its memory is C partitions plus the JVM's heap (a setting, not projected).

**Executor count** for N subscriptions on executors of C cores and M bytes: the least E whose
P = E * C partitions each fit (C partitions of ``N * replication / P`` replicas in M less the
JVM heap), and, with a target throughput, the least E that also reaches it (None when no E up
to ``max_executors`` does).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

GIB = 1 << 30


@dataclass(frozen=True)
class Linear:
    """``intercept + slope * x``, fitted by least squares (:meth:`fit`)."""

    intercept: float
    slope: float

    def __call__(self, x: float) -> float:
        return self.intercept + self.slope * x

    @classmethod
    def fit(cls, xs, ys) -> Linear:
        """Least squares over the points; one point (or one distinct x) gives a line through the
        origin and it.

        >>> Linear.fit([1, 2, 3], [3, 5, 7])
        Linear(intercept=1.0, slope=2.0)
        """
        x = np.asarray(xs, np.float64)
        y = np.asarray(ys, np.float64)
        if len(x) == 0:
            return cls(0.0, 0.0)
        if len(np.unique(x)) < 2:
            return cls(0.0, float(y.mean() / x.mean()) if x.mean() else 0.0)
        slope, intercept = np.polyfit(x, y, 1)
        return cls(round(float(intercept), 12), round(float(slope), 12))


@dataclass(frozen=True)
class AtPartitions:
    """One method's costs at one measured P, as functions of the subscriptions N (seconds per message)."""

    partitions: int
    busy: Linear
    total: Linear
    merge_busy: Linear
    merge_total: Linear
    route: Linear
    replication: float  # replicas / subscriptions (the mean over the measured N)
    report_bytes: Linear = Linear(0.0, 0.0)  # report bytes per message, all partitions (what becomes events)


@dataclass(frozen=True)
class MethodProfile:
    """What the projection knows of a method: its fits per measured P and its memory."""

    method: str
    window: int
    batch_size: int
    sizes: tuple  # the measured N
    at: tuple  # AtPartitions, by increasing P
    bytes_per_replica: float
    bytes_per_window_message: float
    partition_base_bytes: float  # one engine host's interpreter and libraries (measured apart)
    rss_intercept_bytes: float = 0.0  # the resident-set fit's intercept (reported, not projected)
    memory_basis: str = "end"  # "peak": bytes_per_replica fitted on the peak resident set; "end": at the stream's end

    def fits_at(self, partitions: int) -> AtPartitions:
        """The fits at ``partitions`` if measured, else at the largest measured P below it
        (the smallest measured P when none is below)."""
        below = [a for a in self.at if a.partitions <= partitions]
        return below[-1] if below else self.at[0]

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FixedCost:
    """``F(P, K) = f0 + f_task * P / K`` seconds per batch (module docstring); ``per_report_byte``:
    the seconds a Spark task spends per byte of reports besides the engine (writing the events,
    :func:`event_cost`), 0 unless fitted."""

    f0: float
    f_task: float
    per_report_byte: float = 0.0

    def __call__(self, partitions: int, cores: int) -> float:
        return self.f0 + self.f_task * partitions / max(cores, 1)

    @classmethod
    def fit(cls, points: list[tuple[int, float]], cores: int) -> FixedCost:
        """From measured ``(P, fixed seconds per batch)`` on ``cores`` cores: a line in P/K.

        >>> FixedCost.fit([(1, 0.3), (8, 1.0)], cores=2)
        FixedCost(f0=0.2, f_task=0.2, per_report_byte=0.0)
        """
        line = Linear.fit([p / cores for p, _ in points], [s for _, s in points])
        return cls(round(max(line.intercept, 0.0), 12), round(max(line.slope, 0.0), 12))


def per_message(profile: MethodProfile, subscriptions: float, partitions: int) -> dict[str, float]:
    """Seconds per message of the busiest partition, of all partitions, of the busiest and all
    merge buckets, and of routing, at N subscriptions and P partitions (module docstring)."""
    fits = profile.fits_at(partitions)
    scale = fits.partitions / partitions  # beyond the measured P: the subscription part divides
    if partitions == fits.partitions:
        scale = 1.0
    return {
        "busy": fits.busy.intercept + fits.busy.slope * subscriptions * scale,
        "total": fits.total.intercept / scale + fits.total.slope * subscriptions,
        "merge_busy": fits.merge_busy.intercept + fits.merge_busy.slope * subscriptions * scale,
        "merge_total": fits.merge_total.intercept / scale + fits.merge_total.slope * subscriptions,
        "route": fits.route(subscriptions),
        "report_bytes": fits.report_bytes(subscriptions),  # all partitions: the number of replicas is the same
    }


def event_cost(profile: MethodProfile, fixed: FixedCost, subscriptions: float, measured_batch_s: float,
               partitions: int = 1, cores: int = 2) -> FixedCost:
    """``fixed`` with ``per_report_byte`` fitted on one measured Spark run (its mean batch
    seconds): what the run took beyond the projection without it, per byte of reports (the
    events the stateful tasks write, spread over ``min(P, K)`` tasks); never negative.

    >>> prof = MethodProfile("m", 100, 10, (1,), (AtPartitions(1, Linear(0.01, 0.0), Linear(0.01, 0.0),
    ...     Linear(0.0, 0.0), Linear(0.0, 0.0), Linear(0.0, 0.0), 1.0, Linear(1000.0, 0.0)),), 0.0, 0.0, 0.0)
    >>> event_cost(prof, FixedCost(0.5, 0.0), 1, 0.7, partitions=1).per_report_byte  # 0.1 s over 10 x 1000 bytes
    1e-05
    """
    base = project(profile, FixedCost(fixed.f0, fixed.f_task), subscriptions, partitions, cores)
    volume = base.batch_size * per_message(profile, subscriptions, partitions)["report_bytes"] / max(min(partitions, cores), 1)
    extra = (measured_batch_s - base.batch_s) / volume if volume > 0 else 0.0
    return FixedCost(fixed.f0, fixed.f_task, round(max(extra, 0.0), 15))


def stage(busy: float, total: float, cores: int) -> float:
    """A stage's time per message: its slowest task, or the work spread over the cores."""
    return max(busy, total / max(cores, 1))


@dataclass(frozen=True)
class Projection:
    method: str
    subscriptions: float
    partitions: int
    cores: int
    batch_size: int
    batch_s: float
    fixed_s: float
    throughput_msgs_per_s: float
    partition_bytes: float  # the fullest partition's memory (replicas spread as the measured imbalance)
    replicas: float

    def as_dict(self) -> dict:
        return asdict(self)


def partition_bytes(profile: MethodProfile, subscriptions: float, partitions: int,
                    batch_size: int | None = None) -> tuple[float, float]:
    """(bytes of one partition, replicas in all): replicas spread evenly over P, the whole window
    (a conservative share), and one batch's reports (``B * reports(N) / P``: a batch's result
    changes, held once while the task sends them)."""
    fits = profile.fits_at(partitions)
    replicas = fits.replication * subscriptions
    share = profile.window
    batch = int(batch_size or profile.batch_size)
    reports = batch * per_message(profile, subscriptions, partitions)["report_bytes"] / partitions
    return (profile.partition_base_bytes + profile.bytes_per_replica * replicas / partitions
            + profile.bytes_per_window_message * share + reports), replicas


def project(profile: MethodProfile, fixed: FixedCost, subscriptions: float, partitions: int, cores: int,
            batch_size: int | None = None, stretch: float = 1.0) -> Projection:
    """Throughput and memory of ``partitions`` partitions on ``cores`` cores (module docstring).
    ``stretch``: wall seconds per CPU second of the machine the projection is for (1 on a machine
    whose cores are the run's alone; a loaded machine's, measured beside the runs, above 1)."""
    b = int(batch_size or profile.batch_size)
    cost = per_message(profile, subscriptions, partitions)
    per_msg = (stretch * (cost["route"] + stage(cost["busy"], cost["total"], cores)
                          + stage(cost["merge_busy"], cost["merge_total"], cores))
               + fixed.per_report_byte * cost["report_bytes"] / max(min(partitions, cores), 1))
    f = fixed(partitions, cores)
    t = f + b * per_msg
    mem, replicas = partition_bytes(profile, subscriptions, partitions, b)
    return Projection(profile.method, float(subscriptions), int(partitions), int(cores), b, t, f,
                      b / t if t > 0 else math.inf, mem, replicas)


@dataclass(frozen=True)
class Sizing:
    method: str
    subscriptions: float
    executors: int
    partitions: int
    executor_bytes: float  # the partitions' memory on one executor, JVM heap excluded
    throughput_msgs_per_s: float
    executors_for_target: int | None = None
    throughput_at_target: float | None = None
    notes: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def size(profile: MethodProfile, fixed: FixedCost, subscriptions: float, *, cores_per_executor: int = 4,
         executor_bytes: float = 16 * GIB, jvm_bytes: float = 2 * GIB, target_msgs_per_s: float | None = None,
         max_executors: int = 10_000, batch_size: int | None = None, memory_factor: float = 1.0) -> Sizing:
    """The least executors whose partitions hold ``subscriptions`` in memory, their throughput, and
    the least executors reaching ``target_msgs_per_s`` (module docstring).  ``memory_factor``: a
    measured ratio of an engine host's peak to :func:`partition_bytes` (1: the projection as is)."""
    c = int(cores_per_executor)
    budget = executor_bytes - jvm_bytes

    def fits(e: int) -> tuple[bool, Projection]:
        proj = project(profile, fixed, subscriptions, e * c, e * c, batch_size)
        return c * proj.partition_bytes * memory_factor <= budget, proj

    lo = None
    for e in _doubling(max_executors):
        ok, proj = fits(e)
        if ok:
            lo = e
            break
    if lo is None:
        raise ValueError(f"{subscriptions:,.0f} subscriptions do not fit in {max_executors} executors")
    e = _least(lambda x: fits(x)[0], max(1, lo // 2), lo)
    proj = fits(e)[1]
    out = Sizing(profile.method, float(subscriptions), e, e * c, c * proj.partition_bytes * memory_factor,
                 proj.throughput_msgs_per_s)
    if target_msgs_per_s is None:
        return out
    reach = [x for x in _doubling(max_executors) if x >= e
             and project(profile, fixed, subscriptions, x * c, x * c, batch_size).throughput_msgs_per_s
             >= target_msgs_per_s]
    if not reach:
        return Sizing(**{**out.as_dict(), "notes": [f"{target_msgs_per_s:g} msg/s not reached by {max_executors} executors"]})
    hi = reach[0]
    t = _least(lambda x: x >= e and project(profile, fixed, subscriptions, x * c, x * c,
                                            batch_size).throughput_msgs_per_s >= target_msgs_per_s,
               max(e, hi // 2), hi)
    at = project(profile, fixed, subscriptions, t * c, t * c, batch_size).throughput_msgs_per_s
    return Sizing(**{**out.as_dict(), "executors_for_target": t, "throughput_at_target": at})


def _doubling(limit: int):
    e = 1
    while e <= limit:
        yield e
        e *= 2
    if e // 2 < limit:
        yield limit


def _least(ok, lo: int, hi: int) -> int:
    """The least x in [lo, hi] with ok(x), given ok(hi) and ok monotone (binary search)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


# --------------------------------------------------------------------------- fitting


def fit_profile(runs: list[dict], *, host_base_bytes: float = 0.0) -> MethodProfile:
    """A method's profile from :class:`skype.sizing.partitions.PartitionCosts` dicts (one method,
    one window and batch size; several N and P)."""
    methods = {r["method"] for r in runs}
    if len(methods) != 1:
        raise ValueError(f"one method per profile, got {sorted(methods)}")
    window = {r["window"] for r in runs}
    batch = {r["batch_size"] for r in runs}
    if len(window) != 1 or len(batch) != 1:
        raise ValueError("one window and one batch size per profile")
    at = []
    for P in sorted({r["partitions"] for r in runs}):
        rows = sorted((r for r in runs if r["partitions"] == P), key=lambda r: r["subscriptions"])
        n = [r["subscriptions"] for r in rows]

        def line(values) -> Linear:
            return Linear.fit(n, values)

        def msgs(r) -> float:
            return max(r["steady_messages"], 1)

        merge = [r.get("merge_cpu_s") or [0.0] for r in rows]
        at.append(AtPartitions(
            P, line([max(r["apply_cpu_s"]) / msgs(r) for r in rows]), line([sum(r["apply_cpu_s"]) / msgs(r) for r in rows]),
            line([max(m) / msgs(r) for m, r in zip(merge, rows)]), line([sum(m) / msgs(r) for m, r in zip(merge, rows)]),
            Linear(float(np.mean([r["route_s"] / msgs(r) for r in rows])), 0.0),  # a message's routing: the tables, not N
            float(np.mean([r["replication_ratio"] for r in rows])),
            line([r.get("report_bytes", 0) / msgs(r) for r in rows])))
    # memory: the engine's own accounting per window-share message; the resident set per replica
    win = [(sum(m.get("window", 0) + m.get("message_index", 0) for m in r["engine_memory_bytes"]), sum(r["window_share"]))
           for r in runs]
    per_win = sum(b for b, _ in win) / max(sum(s for _, s in win), 1)
    # the peak (registration's transients included) where the runs measured it at two replica counts or more
    peaked = [r for r in runs if r.get("rss_peak_growth_bytes")]
    basis, key = ("peak", "rss_peak_growth_bytes") if len({sum(r["replicas"]) for r in peaked}) >= 2 else \
        ("end", "rss_growth_bytes")
    used = peaked if basis == "peak" else runs
    rss = Linear.fit([sum(r["replicas"]) for r in used], [r[key] - per_win * sum(r["window_share"]) for r in used])
    return MethodProfile(runs[0]["method"], window.pop(), batch.pop(), tuple(sorted({r["subscriptions"] for r in runs})),
                         tuple(at), max(rss.slope, 0.0), per_win, host_base_bytes, rss.intercept, basis)


# --------------------------------------------------------------------------- the check


def check_runs(profiles: dict[str, MethodProfile], fixed: FixedCost, measured: list[dict], subscriptions: float,
               *, cores: int, tolerance: float = 0.25, stretch: dict[int, float] | None = None) -> list[dict]:
    """Projected against measured throughput, one row per measured Spark run
    (``bench/spark_sizing_check.py``'s ``method``, ``partitions``, ``throughput_msgs_per_s``), on
    ``cores`` cores; ``within`` when ``|projected / measured - 1| <= tolerance``; ``stretch``: the
    machine's wall seconds per CPU second at each P (:func:`project`).

    >>> prof = MethodProfile("m", 100, 10, (1,), (AtPartitions(1, Linear(0.01, 0.0), Linear(0.01, 0.0),
    ...     Linear(0.0, 0.0), Linear(0.0, 0.0), Linear(0.0, 0.0), 1.0),), 0.0, 0.0, 0.0)
    >>> row = check_runs({"m": prof}, FixedCost(0.9, 0.0), [{"method": "m", "partitions": 1,
    ...                   "throughput_msgs_per_s": 8.0}], 1, cores=1)[0]
    >>> row["projected"], row["ratio"], row["within_25"]
    (10.0, 1.25, True)
    """
    rows = []
    for run in measured:
        prof = profiles.get(run["method"])
        if prof is None:
            continue
        proj = project(prof, fixed, subscriptions, int(run["partitions"]), cores,
                       stretch=(stretch or {}).get(int(run["partitions"]), 1.0))
        got = float(run["throughput_msgs_per_s"])
        ratio = proj.throughput_msgs_per_s / got if got > 0 else math.inf
        rows.append({"method": run["method"], "partitions": int(run["partitions"]), "measured": got,
                     "projected": proj.throughput_msgs_per_s, "ratio": ratio,
                     "within_25": abs(ratio - 1.0) <= tolerance + 1e-12, "batch_s": proj.batch_s,
                     "fixed_s": proj.fixed_s})
    return rows
