"""The interface every distribution method implements, and the checks they share.

A distribution method maps subscriptions and messages to partition ids in ``[0, P)`` (spec §5.2).
Its contract, for every method:

* **Whole batches.**  ``route_subscriptions`` and ``route_messages`` take a
  :class:`~skype.model.SubscriptionBatch` / :class:`~skype.model.MessageBatch` and return a
  :class:`~skype.partitioning.routing.Routing` (CSR) computed with numpy, without a per-record loop.
* **Pure routing.**  Where a record goes is a function of the record (its id, location, terms,
  alpha and threshold) and of the distribution's build-time tables only; the rows of a batch do
  not influence each other.  One exception, by design: methods with keyword summaries
  (``prefix`` and the hybrids) drop a message's copy to a partition none of whose registered
  subscriptions holds one of the message's terms in its loose prefix; the summary changes only
  when subscriptions are routed, re-thresholded or removed.
* **Meeting.**  If ``ST(s, m) >= theta_s`` (with the theta_s s was last routed or updated with),
  the partitions of s and of m intersect.  A subscription's replicas together therefore see
  every message that can enter its top-k (spec Lemma 7).
* **Lazy reallocation.**  ``update_thresholds`` returns, for each subscription, only the
  partitions it must be *added* to because its loose prefix grew (theta fell); a shrinking prefix
  leaves a harmless extra copy.  Ids never routed through the distribution get empty rows.
* **Summary growth.**  When a term becomes live in a summary, window messages holding it were not
  sent to its partition while it was dead.  A runtime that keeps each partition's share of the
  window next to its subscriptions takes those term ids from :meth:`pop_new_live_terms`,
  re-routes the window messages holding them, and sends the copies a partition lacks.
* **Picklable.**  State is plain numpy arrays, ints and strings in ordinary classes.
"""

from __future__ import annotations

import abc

import numpy as np

from skype.partitioning.capabilities import Capabilities, capabilities_of
from skype.partitioning.routing import Routing
from skype.errors import InputError
from skype.model import MessageBatch, SubscriptionBatch


def check_num_partitions(num_partitions: object) -> int:
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, (int, np.integer)) or num_partitions < 1:
        raise InputError("E023", what="num_partitions", expected="an integer >= 1", value=num_partitions)
    return int(num_partitions)


def check_thresholds(thresholds: object, num_rows: int) -> np.ndarray | None:
    """``None`` (no pruning) or a float64 array of ``num_rows`` thresholds, none NaN."""
    if thresholds is None:
        return None
    arr = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    if len(arr) != num_rows:
        raise InputError("E026", detail=f"{len(arr)} thresholds for {num_rows} subscriptions")
    if np.isnan(arr).any():
        raise InputError("E023", what="a threshold", expected="a number (not NaN)", value=float("nan"))
    return arr


class Distribution(abc.ABC):
    """Base class of the six methods (see module docstring for the contract)."""

    name: str = ""
    num_partitions: int = 1
    broadcasts_messages: bool = False  # True: every message goes to every partition

    @abc.abstractmethod
    def route_subscriptions(self, batch: SubscriptionBatch, thresholds: np.ndarray | None = None) -> Routing:
        """Partitions of each subscription; registers them where the method keeps state."""

    @abc.abstractmethod
    def route_messages(self, batch: MessageBatch) -> Routing:
        """Partitions of each message."""

    def update_thresholds(self, sub_ids: np.ndarray, thresholds: np.ndarray) -> Routing:
        """New partitions each subscription must be added to (default: none, the method ignores
        thresholds)."""
        ids = np.asarray(sub_ids, dtype=np.int64).reshape(-1)
        check_thresholds(thresholds, len(ids))
        return Routing.empty(len(ids))

    def remove_subscriptions(self, sub_ids: np.ndarray) -> None:
        """Forget subscriptions (their terms leave the summaries).  Default: nothing to forget."""

    def pop_new_live_terms(self) -> np.ndarray:
        """Term ids that became live in some keyword summary since the last call (sorted)."""
        return np.zeros(0, dtype=np.int64)

    @property
    def capabilities(self) -> Capabilities:
        """What this method can do (:mod:`skype.partitioning.capabilities`: one table)."""
        return capabilities_of(self.name)

    def describe(self) -> dict:
        """A few facts about the built tables, for reports."""
        return {"method": self.name, "num_partitions": self.num_partitions}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_partitions={self.num_partitions})"
