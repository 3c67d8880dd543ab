"""What every rebalancing policy shares: the statistics it reads, the load model it plans with,
and the plan it returns.

A policy is a pure decision: ``decide(snapshot, **params) -> Plan``.  The snapshot is a copy of
a unit distribution's statistics (:meth:`UnitDistribution.statistics`); nothing is changed until
the caller applies the plan (:func:`skype.partitioning.rebalance.apply_plan`).

**Load model.**  Unit u's cost is its share of its partition's measured load,
``|S_u| * |M_p|`` (see :mod:`skype.partitioning.units`).  Moving u to q is planned as
``|S_u| * |M_q|``: the destination's message rate is taken as fixed (the terms u brings may add a
few messages to q; the next interval measures it).  Every policy balances the same measured
load, ``max_p L_p / mean_p L_p``.

**Forecast (``horizon``).**  The units' replica counts move while a plan waits to take effect:
moves decided at the end of interval i serve interval i + 1, when a drifting stream has added
subscriptions to some units and removed them from others.  With ``horizon = h > 0`` the model
plans with ``max(0, S_u + h * trend_u)``, the replicas extrapolated h intervals along the last
interval's trend (the snapshot's ``unit_trend``: arrivals less departures per unit).  Subscriptions
and bytes moved are still counted on the replicas present now.  ``horizon = 0`` plans on the
present counts (the papers' reading: decide on what was measured).

**Cuts.**  For the tree methods (``kdt``, ``qt``) the snapshot also carries the placements, and a
policy may cut a hot unit in two (:mod:`skype.partitioning.restructure`) before moving one piece:
:meth:`LoadModel.cut` adds the piece to the model, and the plan lists the cuts (``structure =
("cuts", ((unit, kind, at), ...))``, each unit id as numbered when that cut is made) followed by
the moves, numbered after all cuts.

**Measured rates (``measured``).**  With ``measured=True`` the rates are not fixed: each move
re-measures the source's and the destination's message rates on a sample of the last interval's
messages (:mod:`skype.partitioning.rebalance.rates`), instead of the upper bound above.

**Migration cost.**  Each plan counts the subscription replicas and the bytes it moves (record,
terms and top-k state) and states the cost in its paper's own unit (``cost_estimate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from skype.partitioning.rebalance.rates import UnionRates


@dataclass
class Plan:
    """The moves a policy decided: unit ``units[i]`` goes from ``sources[i]`` to
    ``destinations[i]``.  ``structure``: a change of the method's tree that comes with the moves
    (AQWA's split + merge), applied by the method itself."""

    policy: str
    units: np.ndarray
    sources: np.ndarray
    destinations: np.ndarray
    subscriptions: int = 0
    bytes: int = 0
    cost_estimate: float = 0.0
    imbalance_before: float = 1.0
    imbalance_after: float = 1.0
    operations: list[str] = field(default_factory=list)
    structure: tuple | None = None  # AQWA's ((leaf, axis, line, node), ...) or ("cuts", ((unit, kind, at), ...))

    @property
    def empty(self) -> bool:
        return len(self.units) == 0

    def summary(self) -> dict:
        return {"policy": self.policy, "units_moved": int(len(self.units)), "subscriptions_moved": self.subscriptions,
                "bytes_moved": self.bytes, "cost_estimate": float(self.cost_estimate),
                "imbalance_before": self.imbalance_before, "imbalance_predicted": self.imbalance_after,
                "operations": list(self.operations)}


def imbalance(loads: np.ndarray) -> float:
    mean = float(np.mean(loads)) if len(loads) else 0.0
    return float(np.max(loads) / mean) if mean > 0 else 1.0


class LoadModel:
    """The planning state (module docstring): per partition its replicas ``S_p`` and messages
    ``M_p``, load ``S_p * M_p``.  Moving units to q adds their replicas to ``S_q`` and raises
    ``M_q`` to at least the units' message mass (an upper bound on the messages that meet them:
    a unit holding a hot term brings that term's messages along); the source keeps its ``M``
    (an overestimate: the next interval measures it)."""

    def __init__(self, snapshot: dict, horizon: float = 0.0, measured: bool = False) -> None:
        self.snapshot = snapshot
        self.owner = snapshot["owner"].astype(np.int64).copy()
        self.original = snapshot["owner"].astype(np.int64).copy()
        self.present = snapshot["unit_subs"].astype(np.float64)  # replicas now (what a move ships)
        trend = snapshot.get("unit_trend")
        if horizon > 0 and trend is not None and len(trend) == len(self.present):
            self.subs = np.maximum(self.present + horizon * np.asarray(trend, np.float64), 0.0)
        else:
            self.subs = self.present.copy()  # the replicas planned with (module docstring: forecast)
        self.bytes = snapshot["unit_bytes"].astype(np.int64)
        self.num_partitions = int(snapshot["num_partitions"])
        msgs = np.asarray(snapshot["partition_messages"], np.float64)
        seen = msgs.sum() > 0
        # messages per partition (the per-replica rate); 1 before any message was seen
        self.rate = msgs.copy() if seen else np.ones(self.num_partitions)
        mass = snapshot.get("unit_mass")
        self.mass = np.asarray(mass, np.float64) if mass is not None and seen else np.zeros(len(self.subs))
        self.replicas = np.bincount(self.owner, weights=self.subs, minlength=self.num_partitions)
        self.operations: list[str] = []
        self.union: UnionRates | None = None  # measured rates (module docstring), when asked and possible
        recent = snapshot.get("recent_messages")
        if measured and seen and recent is not None and len(recent[0]) and "unit_terms" in snapshot:
            self.union = UnionRates(snapshot, self.owner, self.rate)
        region = snapshot.get("unit_region")
        self.region = np.asarray(region, np.int64).copy() if region is not None else np.arange(len(self.owner))
        self.cuttable = bool(snapshot.get("cuttable", False))
        self.num_snapshot_units = len(self.owner)  # units the snapshot's placements describe
        self.real = np.arange(len(self.owner))  # each model unit's id once the cuts so far are made
        self.cut_units: set[int] = set()
        self.cuts: list[tuple[int, str, object]] = []

    def cut(self, unit: int, option: tuple) -> int:
        """Cut ``unit`` as ``option`` (from :func:`skype.partitioning.restructure.cut_options`):
        the unit keeps piece A, a new model unit (returned) piece B, both in the unit's partition."""
        kind, at, a, b, bytes_a, bytes_b = option
        now, planned = max(self.present[unit], 1.0), self.subs[unit]
        new = len(self.owner)
        self.owner = np.r_[self.owner, self.owner[unit]]
        self.original = np.r_[self.original, self.owner[unit]]
        self.present = np.r_[self.present, b]
        self.present[unit] = a
        self.subs = np.r_[self.subs, planned * b / now]
        self.subs[unit] = planned * a / now
        self.bytes = np.r_[self.bytes, int(bytes_b)]
        self.bytes[unit] = int(bytes_a)
        self.mass = np.r_[self.mass, self.mass[unit]]  # each piece's terms are a subset: still a bound
        self.region = np.r_[self.region, self.region[unit] if kind == "text" else int(self.region.max()) + 1]
        self.replicas[self.owner[unit]] += self.subs[unit] + self.subs[new] - planned
        if self.union is not None:
            self.union.add_piece(unit, int(self.owner[unit]))
        r = int(self.real[unit])
        if kind == "text":  # the new group follows the unit: later ids shift by one
            self.real[self.real > r] += 1
            self.real = np.r_[self.real, r + 1]
        else:  # a new region: its unit comes last
            self.real = np.r_[self.real, int(self.real.max(initial=-1)) + 1]
        self.cuts.append((r, kind, at))
        self.cut_units.update((unit, new))
        self.operations.append(f"cut {kind} unit {r} at {at}: {a:.0f} + {b:.0f} replicas")
        return new

    def cut_options(self, unit: int) -> list[tuple]:
        """The cuts of a unit of the snapshot (none for a piece cut in this plan, or for methods
        whose units are cells)."""
        if not self.cuttable or unit >= self.num_snapshot_units or unit in self.cut_units:
            return []
        from skype.partitioning.restructure import cut_options

        return cut_options(self.snapshot, unit)

    @property
    def loads(self) -> np.ndarray:
        return self.replicas * self.rate

    def cost(self, units: np.ndarray, partition: int) -> float:
        """The load ``units`` would add to ``partition``."""
        units = np.asarray(units, np.int64)
        if self.union is not None:
            rate = self.union.rate_with(partition, units)
        else:
            rate = max(self.rate[partition], float(self.mass[units].max(initial=0.0)))
        return float((self.replicas[partition] + self.subs[units].sum()) * rate - self.loads[partition])

    def move(self, units: np.ndarray, dest: int) -> None:
        units = np.asarray(units, np.int64)
        if len(units) == 0:
            return
        src = self.owner[units]
        self.replicas -= np.bincount(src, weights=self.subs[units], minlength=self.num_partitions)
        self.replicas[dest] += self.subs[units].sum()
        if self.union is not None:
            self.union.move(units, src, dest)
            for p in np.unique(np.r_[src, dest]):
                self.rate[p] = self.union.rate(int(p))
        else:
            self.rate[dest] = max(self.rate[dest], float(self.mass[units].max(initial=0.0)))
        self.owner[units] = dest

    def save(self) -> tuple:
        """The state moves change (owners, replicas, rates, cover counts), to try a move."""
        return (self.owner.copy(), self.replicas.copy(), self.rate.copy(),
                None if self.union is None else self.union.C.copy())

    def restore(self, state: tuple) -> None:
        self.owner, self.replicas, self.rate = state[0], state[1], state[2]
        if self.union is not None:
            self.union.C = state[3]

    def imbalance(self) -> float:
        return imbalance(self.loads)

    def moved_fraction(self) -> float:
        """Replicas moved so far over all replicas."""
        changed = self.owner != self.original
        return float(self.present[changed].sum() / max(self.present.sum(), 1.0))

    def plan(self, policy: str, before: float, cost_estimate: float, structure: tuple | None = None) -> Plan:
        changed = np.flatnonzero(self.owner != self.original)
        if self.cuts:
            structure = ("cuts", tuple(self.cuts))
        return Plan(policy, self.real[changed], self.original[changed], self.owner[changed],
                    subscriptions=int(self.present[changed].sum()), bytes=int(self.bytes[changed].sum()),
                    cost_estimate=float(cost_estimate), imbalance_before=before, imbalance_after=self.imbalance(),
                    operations=list(self.operations), structure=structure)


def empty_plan(policy: str, before: float = 1.0) -> Plan:
    z = np.zeros(0, np.int64)
    return Plan(policy, z, z, z, imbalance_before=before, imbalance_after=before)
