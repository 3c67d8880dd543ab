"""Result-change events of one command, kept as columns and serialised only when sent.

An :class:`EventBlock` holds the events of one command: ``n`` events with consecutive seqs
``seq0 .. seq0 + n - 1``, for the subscriptions ``subs`` (ascending), all at one ``position``.
A top-k subscription's event is three CSR slices: the entries that entered (message ids and
scores, in ranking order), and the ids that left.  The events of other kinds (``knn``,
``range``, ``terms``: entries and term names that are not plain numbers) and the events built
one at a time (a subscription created, replaced or deleted) are kept as their objects in
``objects``.  :meth:`EventBlock.encode` builds the JSON text of the events a stream sends, once
per event (msgspec; kept on the block in ``encoded`` so that every follower of a subscription and
every replay share the same bytes), never for an event nobody follows: such an event costs a few
array slots, not a dict and a string.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

_ENCODER = msgspec.json.Encoder()

_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_F = np.zeros(0, np.float64)


class EventBlock:
    __slots__ = ("seq0", "subs", "position", "ent_ptr", "ent_ids", "ent_scores", "left_ptr", "left_ids",
                 "removed", "objects", "first", "born", "encoded", "_lists")

    def __init__(self, seq0: int, subs: np.ndarray, position: int, *, ent_ptr: np.ndarray | None = None,
                 ent_ids: np.ndarray = _EMPTY_I, ent_scores: np.ndarray = _EMPTY_F,
                 left_ptr: np.ndarray | None = None, left_ids: np.ndarray = _EMPTY_I,
                 removed: np.ndarray | None = None, objects: dict[int, dict] | None = None) -> None:
        n = len(subs)
        zeros = np.zeros(n + 1, np.int64)
        self.seq0, self.subs, self.position = seq0, subs, position
        self.ent_ptr = ent_ptr if ent_ptr is not None else zeros
        self.ent_ids, self.ent_scores = ent_ids, ent_scores
        self.left_ptr = left_ptr if left_ptr is not None else zeros
        self.left_ids = left_ids
        self.removed = removed if removed is not None else np.zeros(n, bool)
        self.objects = objects or {}  # event index -> its whole event object
        self.first = 0  # events before this one are no longer retained (the hub's ring)
        self.born = 0.0  # when the hub received it (time.monotonic): retention by age
        self.encoded: dict[int, bytes] = {}  # event index -> its JSON text, built once (encode)
        self._lists: tuple | None = None  # the CSR columns as Python lists, built once (encode)

    @classmethod
    def from_objects(cls, events: list[dict]) -> EventBlock:
        """A block of event objects with consecutive seqs (one-off events, tests)."""
        seq0 = events[0]["seq"]
        if any(ev["seq"] != seq0 + i for i, ev in enumerate(events)):
            raise ValueError("event seqs must be consecutive")
        subs = np.array([ev["sub"] for ev in events], np.int64)
        removed = np.array([bool(ev.get("removed")) for ev in events], bool)
        return cls(seq0, subs, events[0]["position"], removed=removed, objects=dict(enumerate(events)))

    @classmethod
    def single(cls, ev: dict) -> EventBlock:
        """One event object as a block: columns when it is a top-k one (entries ``{"id",
        "score"}``, ids that left), else the object itself."""
        entered, left = ev["entered"], ev["left"]
        subs = np.array([ev["sub"]], np.int64)
        removed = np.array([bool(ev.get("removed"))], bool)
        if all(isinstance(e, dict) and e.keys() == {"id", "score"} for e in entered) \
                and all(type(i) is int for i in left):
            return cls(ev["seq"], subs, ev["position"], ent_ptr=np.array([0, len(entered)], np.int64),
                       ent_ids=np.array([e["id"] for e in entered], np.int64),
                       ent_scores=np.array([e["score"] for e in entered], np.float64),
                       left_ptr=np.array([0, len(left)], np.int64), left_ids=np.array(left, np.int64),
                       removed=removed)
        return cls(ev["seq"], subs, ev["position"], removed=removed, objects={0: ev})

    @classmethod
    def concat(cls, a: EventBlock, b: EventBlock) -> EventBlock:
        """``a`` then ``b`` (``b`` starts right after ``a``) as one block; ``position`` is per
        block, so only blocks of the same position merge."""
        assert b.seq0 == a.last_seq + 1 and a.position == b.position
        n = len(a)
        out = cls(a.seq0, np.r_[a.subs, b.subs], a.position,
                  ent_ptr=np.r_[a.ent_ptr, b.ent_ptr[1:] + a.ent_ptr[-1]], ent_ids=np.r_[a.ent_ids, b.ent_ids],
                  ent_scores=np.r_[a.ent_scores, b.ent_scores],
                  left_ptr=np.r_[a.left_ptr, b.left_ptr[1:] + a.left_ptr[-1]], left_ids=np.r_[a.left_ids, b.left_ids],
                  removed=np.r_[a.removed, b.removed],
                  objects={**a.objects, **{n + i: obj for i, obj in b.objects.items()}})
        out.first = a.first
        return out

    def __len__(self) -> int:
        return len(self.subs)

    @property
    def last_seq(self) -> int:
        return self.seq0 + len(self.subs) - 1

    def event(self, i: int) -> dict:
        """Event ``i``'s object, as ``skype.service.state`` documents it."""
        obj = self.objects.get(i)
        if obj is not None:
            return obj
        a, b = int(self.ent_ptr[i]), int(self.ent_ptr[i + 1])
        entered = [{"id": mid, "score": score}
                   for mid, score in zip(self.ent_ids[a:b].tolist(), self.ent_scores[a:b].tolist())]
        c, d = int(self.left_ptr[i]), int(self.left_ptr[i + 1])
        ev: dict[str, Any] = {"sub": int(self.subs[i]), "seq": self.seq0 + i, "position": self.position,
                              "entered": entered, "left": self.left_ids[c:d].tolist()}
        if self.removed[i]:
            ev["removed"] = True
        return ev

    def events(self) -> list[dict]:
        return [self.event(i) for i in range(len(self.subs))]

    def data(self, i: int) -> str:
        return self.encode([i])[0].decode()

    def encode(self, indices: list[int]) -> list[bytes]:
        """The JSON text (UTF-8) of events ``indices``, each built once and kept in
        ``encoded``: the columns are turned into Python lists once per block, then each event's
        object is encoded by msgspec (about 1-3 us an event, against 10-25 for a dict and
        ``json.dumps``)."""
        cache = self.encoded
        out: list[bytes] = []
        lists = self._lists
        for i in indices:
            text = cache.get(i)
            if text is None:
                obj = self.objects.get(i)
                if obj is None:
                    if lists is None:
                        lists = self._lists = (self.ent_ptr.tolist(), self.ent_ids.tolist(),
                                               self.ent_scores.tolist(), self.left_ptr.tolist(),
                                               self.left_ids.tolist(), self.subs.tolist(), self.removed.tolist())
                    eptr, eids, escores, lptr, lids, subs, removed = lists
                    a, b = eptr[i], eptr[i + 1]
                    obj = {"sub": subs[i], "seq": self.seq0 + i, "position": self.position,
                           "entered": [{"id": m, "score": sc} for m, sc in zip(eids[a:b], escores[a:b])],
                           "left": lids[lptr[i]:lptr[i + 1]]}
                    if removed[i]:
                        obj["removed"] = True
                text = cache[i] = _ENCODER.encode(obj)
            out.append(text)
        return out

    def nbytes(self) -> int:
        arrays = (self.subs, self.ent_ptr, self.ent_ids, self.ent_scores, self.left_ptr, self.left_ids, self.removed)
        return sum(a.nbytes for a in arrays)
