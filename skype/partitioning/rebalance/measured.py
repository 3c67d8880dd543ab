"""Planning with measured partition loads instead of the ``|S_p| * |M_p|`` model.

The papers' policies plan with a model of the load: a partition's replicas times the messages
routed to it (:class:`~skype.partitioning.rebalance.base.LoadModel`).  Where the runtime measures
each partition's work (engine seconds on Spark), the model can miss what the work depends on: two
partitions with as many subscriptions and the same messages can differ threefold when one holds the
subscriptions of a dense region, whose top-k lists every message there changes.

:func:`with_partition_loads` rescales a snapshot so that the policy's planned load of every
partition equals its measured load, keeping the model's shape inside a partition: partition p's
cost per (replica x message) becomes ``f_p = measured_p / (S_p * M_p)``; its message rate
``M_p`` and the message masses of its units are multiplied by ``f_p``.  A unit moved to q is then
planned at q's measured cost per replica, as the model plans it at q's message rate.  Partitions
with no modelled load take the median factor.  Invariant: ``LoadModel(snapshot).loads`` equals the
measured loads (up to rounding) wherever the model's load is positive; nothing else in the
snapshot changes, so every policy reads it unchanged.
"""

from __future__ import annotations

import numpy as np

from skype.errors import InputError


def with_partition_loads(snapshot: dict, loads) -> dict:
    """A copy of ``snapshot`` whose planned partition loads are ``loads`` (module docstring)."""
    num_partitions = int(snapshot["num_partitions"])
    loads = np.asarray(loads, np.float64)
    if loads.shape != (num_partitions,) or not np.isfinite(loads).all() or (loads < 0).any():
        raise InputError("E023", what="measured partition loads",
                         expected=f"{num_partitions} finite values >= 0", value=loads.tolist())
    owner = np.asarray(snapshot["owner"], np.int64)
    replicas = np.bincount(owner, weights=np.asarray(snapshot["unit_subs"], np.float64), minlength=num_partitions)
    messages = np.asarray(snapshot["partition_messages"], np.float64)
    if messages.sum() == 0:
        messages = np.ones(num_partitions)  # the model's rate before any message (LoadModel)
    model = replicas * messages
    positive = model > 0
    if not positive.any() or loads.sum() == 0:
        return dict(snapshot)
    factor = np.full(num_partitions, float(np.median(loads[positive] / model[positive])))
    factor[positive] = loads[positive] / model[positive]
    out = dict(snapshot)
    out["partition_messages"] = messages * factor
    mass = snapshot.get("unit_mass")
    if mass is not None:
        out["unit_mass"] = np.asarray(mass, np.float64) * factor[owner]
    if "unit_cost" in snapshot:
        out["unit_cost"] = np.asarray(snapshot["unit_subs"], np.float64) * out["partition_messages"][owner]
    return out
