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

**Migration cost.**  Each plan counts the subscription replicas and the bytes it moves (record,
terms and top-k state) and states the cost in its paper's own unit (``cost_estimate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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
    structure: tuple | None = None

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

    def __init__(self, snapshot: dict, horizon: float = 0.0) -> None:
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

    @property
    def loads(self) -> np.ndarray:
        return self.replicas * self.rate

    def cost(self, units: np.ndarray, partition: int) -> float:
        """The load ``units`` would add to ``partition``."""
        units = np.asarray(units, np.int64)
        rate = max(self.rate[partition], float(self.mass[units].max(initial=0.0)))
        return float((self.replicas[partition] + self.subs[units].sum()) * rate - self.loads[partition])

    def move(self, units: np.ndarray, dest: int) -> None:
        units = np.asarray(units, np.int64)
        if len(units) == 0:
            return
        src = self.owner[units]
        self.replicas -= np.bincount(src, weights=self.subs[units], minlength=self.num_partitions)
        self.replicas[dest] += self.subs[units].sum()
        self.rate[dest] = max(self.rate[dest], float(self.mass[units].max(initial=0.0)))
        self.owner[units] = dest

    def imbalance(self) -> float:
        return imbalance(self.loads)

    def moved_fraction(self) -> float:
        """Replicas moved so far over all replicas."""
        changed = self.owner != self.original
        return float(self.present[changed].sum() / max(self.present.sum(), 1.0))

    def plan(self, policy: str, before: float, cost_estimate: float, structure: tuple | None = None) -> Plan:
        changed = np.flatnonzero(self.owner != self.original)
        return Plan(policy, changed, self.original[changed], self.owner[changed],
                    subscriptions=int(self.present[changed].sum()), bytes=int(self.bytes[changed].sum()),
                    cost_estimate=float(cost_estimate), imbalance_before=before, imbalance_after=self.imbalance(),
                    operations=list(self.operations), structure=structure)


def empty_plan(policy: str, before: float = 1.0) -> Plan:
    z = np.zeros(0, np.int64)
    return Plan(policy, z, z, z, imbalance_before=before, imbalance_after=before)
