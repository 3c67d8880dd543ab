"""DSkype's distribution layer: which partitions each subscription and each message go to.

Six methods (spec §5.2, Table 2), all pure Python + numpy, routing whole batches at once:

============== ============================================ ============ =====================
method         placement                                    replication  messages go to
============== ============================================ ============ =====================
hashing        ``h(s.id) mod P`` (Eq. 14)                   1            all P partitions
location       cost-based KD split, Algorithm 3 (Eq. 15)    1            all P partitions
keyword        term ranges, Algorithm 4 (Eqs. 16-17)        <= |s.psi|   ranges of its terms
prefix         ranges over loose prefixes (Eq. 18, Lemma 7) <= |s.lp|    ranges of its live terms
spatial-first  location (N1) x prefix (N2)                  <= |s.lp|    N1 x live ranges
keyword-first  prefix (N1) x location (N2)                  <= |s.lp|    live ranges x N2
agrid          Tornado's A-Grid: rectangles of grid cells   1            partitions whose
kdt            PS2Stream's kdt-tree: kd leaves, text ranges <= |s.lp|    keyword summary
qt             SSTD's QT-tree: quadrants, textual children  1            holds one of its
aqwa           AQWA's adaptive kd-tree on the grid          1            terms
============== ============================================ ============ =====================

The term ranges of keyword, prefix and the hybrids are cut, by default (``cut="balanced"``), so
that the work an engine does on the sample (postings and messages, a model fitted on measured
partitions) is as even as consecutive ranges allow; ``cut="bisection"`` is the paper's
Algorithm 4 (:mod:`skype.partitioning.ranges`).

The last four are *adaptive*: their units (grid cells, tree leaves) can move between partitions
at runtime (``skype.partitioning.rebalance``); see ``skype.partitioning.units``.

>>> from skype.data import make_workload
>>> w = make_workload("tweets", num_subs=300, num_messages=1000, seed=2)
>>> dist = build_distribution("prefix", 8, w.subscriptions, w.messages, w.vocabulary)
>>> subs = dist.route_subscriptions(w.subscriptions)          # Routing: CSR indptr/partitions
>>> msgs = dist.route_messages(w.messages.slice(0, 100))
>>> (dist.name, dist.num_partitions, subs.rows, msgs.rows)
('prefix', 8, 300, 100)

See ``docs/distribution.md`` for the formulas, the safety arguments and measurements.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from skype.partitioning.agrid import AGridDistribution
from skype.partitioning.aqwa import AqwaDistribution
from skype.partitioning.base import Distribution, check_num_partitions
from skype.partitioning.capabilities import CAPABILITIES, Capabilities, capabilities_of
from skype.partitioning.hashing import HashingDistribution
from skype.partitioning.hybrid import CompositeDistribution, build_hybrid, default_outer
from skype.partitioning.kdt import KdtDistribution
from skype.partitioning.location import LocationDistribution
from skype.partitioning.prefix import EPS, loose_prefix_lengths, suffix_sums
from skype.partitioning.qt import QtDistribution
from skype.partitioning.ranges import KeywordDistribution, PrefixDistribution, RangeDistribution
from skype.partitioning.routing import Routing, splitmix64
from skype.partitioning.thresholds import THRESHOLD_ENGINES, estimate_thresholds, kscore_thresholds
from skype.partitioning.units import UnitDistribution
from skype.errors import InputError, invalid_choice
from skype.model import MessageBatch, SubscriptionBatch
from skype.text import Vocabulary

# the methods, from their capability table; adaptive: placement units move at runtime
# (skype.partitioning.rebalance)
STATIC_METHODS = tuple(m for m, c in CAPABILITIES.items() if not c.adaptive)
ADAPTIVE_METHODS = tuple(m for m, c in CAPABILITIES.items() if c.adaptive)
METHODS = STATIC_METHODS + ADAPTIVE_METHODS
_ADAPTIVE_BUILD: dict[str, Callable[..., UnitDistribution]] = {
    "agrid": AGridDistribution.build, "kdt": KdtDistribution.build, "qt": QtDistribution.build,
    "aqwa": AqwaDistribution.build}

# The keyword parameters each method accepts (``**method_params`` of build_distribution).
METHOD_PARAMS = {
    "hashing": (),
    "location": ("bounds",),
    "keyword": ("summary", "cut"),
    "prefix": ("summary", "cut"),
    "spatial-first": ("n1", "bounds", "summary", "cut"),
    "keyword-first": ("n1", "bounds", "summary", "cut"),
    "agrid": ("grid", "bounds", "calibrate", "refine"),
    "kdt": ("grid", "bounds", "delta", "sigma", "leaf_factor", "calibrate", "refine"),
    "qt": ("grid", "bounds", "leaf_factor", "calibrate", "refine"),
    "aqwa": ("grid", "bounds", "calibrate", "refine"),
}
REFINE_ROUNDS = 6  # rounds of a build-time refinement (``refine``)


def build_distribution(method: str, num_partitions: int, subscriptions: SubscriptionBatch,
                       sample: MessageBatch | None = None, vocabulary: Vocabulary | None = None,
                       thresholds: np.ndarray | None = None, **method_params) -> Distribution:
    """Build ``method`` over ``num_partitions`` partitions from the subscriptions, a sample of
    messages (cost estimates) and the vocabulary; ``thresholds`` (theta_s per subscription, None =
    0) shape loose prefixes.  The subscriptions given are registered (methods with state).

    Parameters (``method_params``): ``summary`` (keyword summaries; default on for prefix and the
    hybrids, off for keyword), ``cut`` (the term ranges of keyword, prefix and the hybrids:
    ``"balanced"``, the default, or the paper's ``"bisection"``; :mod:`skype.partitioning.ranges`),
    ``n1`` (outer partitions of a hybrid, a divisor of P), ``bounds`` (the data space, for the
    location regions).  Adaptive methods: ``refine`` (a rebalancing
    policy, e.g. ``"sstd"``; default None) runs that policy on the sample for up to
    ``REFINE_ROUNDS`` rounds after the method's own build and keeps the layout that measured the
    lowest imbalance on it (:func:`skype.partitioning.rebalance.calibrate`).
    """
    if method not in METHODS:
        raise invalid_choice("distribution method", method, METHODS)
    num_partitions = check_num_partitions(num_partitions)
    unknown = sorted(set(method_params) - set(METHOD_PARAMS[method]))
    if unknown:
        raise InputError("E023", what=f"parameters of method {method!r}",
                         expected=f"among {list(METHOD_PARAMS[method]) or 'none'}", value=unknown)
    if method == "hashing":
        return HashingDistribution.build(num_partitions, subscriptions)
    if method == "location":
        return LocationDistribution.build(num_partitions, subscriptions, sample, **method_params)
    if method == "keyword":
        return KeywordDistribution.build(num_partitions, subscriptions, sample, vocabulary, **method_params)
    if method in _ADAPTIVE_BUILD:
        refine = method_params.pop("refine", None)
        dist = _ADAPTIVE_BUILD[method](num_partitions, subscriptions, sample, vocabulary, thresholds, **method_params)
        if refine is None or refine == "never":
            return dist
        from skype.partitioning.rebalance import calibrate, check_policy

        check_policy(refine, method)
        return calibrate(dist, sample, refine, rounds=REFINE_ROUNDS)
    if method == "prefix":
        return PrefixDistribution.build(num_partitions, subscriptions, sample, vocabulary, thresholds,
                                        **method_params)
    return build_hybrid(method, num_partitions, subscriptions, sample, vocabulary, thresholds, **method_params)


__all__ = [
    "ADAPTIVE_METHODS", "AGridDistribution", "CAPABILITIES", "Capabilities", "capabilities_of", "AqwaDistribution", "EPS", "KdtDistribution", "METHODS",
    "METHOD_PARAMS", "QtDistribution", "STATIC_METHODS", "UnitDistribution", "THRESHOLD_ENGINES", "CompositeDistribution", "Distribution",
    "HashingDistribution", "KeywordDistribution", "LocationDistribution", "PrefixDistribution",
    "RangeDistribution", "Routing", "build_distribution", "default_outer", "estimate_thresholds",
    "kscore_thresholds", "loose_prefix_lengths", "splitmix64", "suffix_sums",
]
