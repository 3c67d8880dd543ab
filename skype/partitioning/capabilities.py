"""What each distribution method can do, in one table: the runtime asks the table, never a name.

One row per method (:data:`CAPABILITIES`), read through :attr:`Distribution.capabilities
<skype.partitioning.base.Distribution.capabilities>` or :func:`capabilities_of`.  Invariants: every
method of :data:`skype.partitioning.METHODS` has a row; a method that is not ``replicated``
places each subscription on exactly one partition (its reports are final: no merge stage); one
that ``routes_everywhere`` gets every message on every partition and each command on the owner
of its record under the versioned ownership tables (the adaptive methods on Spark,
:mod:`skype.dskype.handover`); ``kinds`` are served exactly beside
topk, ``kinds_with_terms`` only when the subscription carries terms (a text predicate places it).
Snapshot queries (``{"op": "query"}``, :mod:`skype.dskype.snapshots`): ``snapshot_kinds`` are
answered exactly, ``snapshot_kinds_with_terms`` only when the query carries terms; a method whose
every partition receives every message (``whole_window``) answers a query from one partition.

>>> capabilities_of("location").replicated, capabilities_of("prefix").activation
(False, True)
>>> sorted(m for m, c in CAPABILITIES.items() if c.cuttable)
['kdt', 'qt']
"""

from __future__ import annotations

from dataclasses import dataclass

from skype.errors import InputError

ALL_KINDS = ("range", "knn", "terms")
SNAPSHOT_KINDS = ("topk", "range", "knn", "terms")


@dataclass(frozen=True)
class Capabilities:
    """What one method declares (see the module's comment)."""

    replicated: bool  # may place a subscription on several partitions: an exact merge follows
    routes_everywhere: bool = False  # every message to every partition, commands to their owner (adaptive ownership)
    kinds: tuple[str, ...] = ALL_KINDS  # range/knn/terms subscriptions served exactly
    kinds_with_terms: tuple[str, ...] = ()  # served only with terms (placed by their text)
    activation: bool = False  # loose-prefix activation and keyword summaries (skype.dskype.activation)
    thresholds: bool = False  # the build's cost model needs each subscription's estimated theta
    adaptive: bool = False  # units that move at runtime (live rebalancing)
    cuttable: bool = False  # units are tree leaves a rebalancing may cut (skype.partitioning.restructure)
    whole_window: bool = False  # every partition receives every message (one partition holds the window)
    snapshot_kinds: tuple[str, ...] = SNAPSHOT_KINDS  # snapshot queries answered exactly
    snapshot_kinds_with_terms: tuple[str, ...] = ()  # answered only with terms (merged over the partitions)

    def served(self) -> str:
        """What the method serves beside topk, in words (the E048 refusals)."""
        if self.kinds:
            return ", ".join(self.kinds)
        return " and ".join(self.kinds_with_terms) + " with terms (a text predicate)"

    def snapshots_served(self) -> str:
        """The snapshot queries the method answers, in words (the E135 refusals)."""
        parts = [", ".join(k for k in self.snapshot_kinds if k not in self.snapshot_kinds_with_terms)]
        if self.snapshot_kinds_with_terms:
            parts.append(", ".join(self.snapshot_kinds_with_terms) + " with terms")
        return "; ".join(p for p in parts if p) or "none"


_PLACED_BY_TERMS = ("range", "knn")  # kinds a text predicate places on the term partitions
# snapshot queries whose every answer holds a query term: each partition answers over its window
# share (every message reaches the partitions of its terms) and the partial answers are merged;
# terms counts every message of its rectangle, whatever its terms: exact only where one partition
# owns each term whole (keyword ranges: it holds every message with the term), docs/queries.md
_SNAPSHOTS_BY_TERMS = ("topk", "range", "knn")
_TERMS_BY_OWNER = ("terms",)

CAPABILITIES: dict[str, Capabilities] = {
    "hashing": Capabilities(replicated=False, whole_window=True),
    "location": Capabilities(replicated=False, whole_window=True),
    "keyword": Capabilities(replicated=True, kinds=(), kinds_with_terms=_PLACED_BY_TERMS,
                            snapshot_kinds=_TERMS_BY_OWNER, snapshot_kinds_with_terms=_SNAPSHOTS_BY_TERMS),
    # with keyword summaries on, snapshot queries are refused after planning (skype.dskype.snapshots)
    "prefix": Capabilities(replicated=True, kinds=(), kinds_with_terms=_PLACED_BY_TERMS, activation=True,
                           thresholds=True, snapshot_kinds=_TERMS_BY_OWNER,
                           snapshot_kinds_with_terms=_SNAPSHOTS_BY_TERMS),
    "spatial-first": Capabilities(replicated=True, kinds=(), kinds_with_terms=_PLACED_BY_TERMS, thresholds=True,
                                  snapshot_kinds=(), snapshot_kinds_with_terms=_SNAPSHOTS_BY_TERMS),
    "keyword-first": Capabilities(replicated=True, kinds=(), kinds_with_terms=_PLACED_BY_TERMS, thresholds=True,
                                  snapshot_kinds=(), snapshot_kinds_with_terms=_SNAPSHOTS_BY_TERMS),
    "agrid": Capabilities(replicated=False, routes_everywhere=True, adaptive=True, whole_window=True),
    "kdt": Capabilities(replicated=False, routes_everywhere=True, adaptive=True, cuttable=True, whole_window=True),
    "qt": Capabilities(replicated=False, routes_everywhere=True, adaptive=True, cuttable=True, whole_window=True),
    "aqwa": Capabilities(replicated=False, routes_everywhere=True, adaptive=True, whole_window=True),
}


def capabilities_of(method: str) -> Capabilities:
    """The row of ``method`` (E022 for an unknown one)."""
    try:
        return CAPABILITIES[method]
    except KeyError:
        raise InputError("E022", what="distribution method", value=method,
                         choices=", ".join(CAPABILITIES)) from None
