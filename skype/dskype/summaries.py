"""Keyword summaries of ``prefix`` partitions on Spark: a message goes only where a term of it is live.

Tornado's per-evaluator summaries, the distribution layer's ``summary`` (spec §5.2): partition q
receives a message only for the terms of its range that some replica hosted on q holds.  With the
loose-prefix activation (:mod:`skype.dskype.activation`) a replica that sleeps stops holding its
terms (``mode="active"``, the paper's summary: only the loose prefix is live), so messages whose
terms only dormant replicas hold go nowhere; ``mode="hosted"`` keeps every hosted record's terms
live, dormant or not.

**The cycle.**  Structured Streaming has no edge from the stateful stage back to the router.  The
summary goes through files: at the end of a batch with high-water mark ``h`` the partition writes
its live terms as *version* ``h + 1`` (``DIR/p<q>-<version>.npy``, only when they changed), and the
router, for an Arrow batch whose first message is ``lo``, takes each partition's newest version
``<= lo`` (none yet: every term is live, the keyword routing) and stamps what it used on the routed
row (``version:digest``, or ``*``).  A re-run batch writes the same version again; a version is
read only after the batch that wrote it committed, and the digest catches anything else.

**Coverage (the invariant).**  After each batch, partition q's window share holds every window
message having a term of ``A`` = the terms held at the end of the batch.  A batch reads the routed
set ``R`` from its rows (the intersection when rows disagree; ``*`` routes everything).  At its
start the terms it will need are ``A`` plus those of the replicas it wakes and subscribes: the
new ones lack the window's older messages (``missing_old = new - A``), and terms outside ``R`` lack
this batch's (``missing_new = (A + new) - R``).  Both come from the stream itself
(:class:`skype.spark.backfill.BackfillSource`: the records at positions ``(h - N, h_batch]``,
screened as the router screens them): the batch's part joins its messages, the older part needs the engine rebuilt over
share + backfill (the core's windows only append), after which the partition restates the lists
of replicated subscriptions that changed (a backfilled message has no term of ``A``, so a
single-replica subscription, whose terms are all here, cannot score it: checked).  The backfill
is stored as one more window segment, so a rebuild from durable state sees it.  Needs terms only
grow this way, and whatever stops holding a term loses nothing it needs.  Exactness holds for any
``R``: a stale, missing or mismatched table costs a larger backfill, never a message.

Wakes happen at the start of the batch after the one that decided them (the same moment of the
stream: nothing arrives in between), so their terms are in the version the router reads.

**Per-batch cost.**  A partition keeps the array it last published.  While the router stamps
that version and no term has gained or lost its last holder since, a batch's checks look up only
its own new terms (subscribes, wakes), and nothing is sorted, hashed or re-read: work in proportion
to the batch, not to the partition's live terms.  Otherwise (a restart, another table read) the
sets are computed in full.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from skype.model import MessageBatch
from skype.dskype.files import write_replacing
from skype.dskype.stamps import ALL, summary_digest, summary_parts, summary_stamp

_NAME = re.compile(r"^p(\d+)-(\d+)\.npy$")
KEEP_VERSIONS = 4  # versions kept per partition (the router may read one a batch older)


def digest(terms: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(terms, np.int64).tobytes(), digest_size=8).hexdigest()


def _file(directory: str, partition: int, version: int) -> str:
    return os.path.join(directory, f"p{partition:05d}-{version:012d}.npy")


def _versions(directory: str) -> dict[int, list[int]]:
    """Partition -> its published versions, ascending."""
    out: dict[int, list[int]] = {}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return out
    for name in names:
        m = _NAME.match(name)
        if m:
            out.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    for versions in out.values():
        versions.sort()
    return out


def _load(path: str) -> np.ndarray | None:
    try:
        return np.load(path, allow_pickle=False)
    except (FileNotFoundError, ValueError, OSError):
        return None


def publish(directory: str, partition: int, version: int, terms: np.ndarray) -> str:
    """Write a partition's live terms as ``version`` (atomically); keep the newest few versions.
    Returns the digest."""
    terms = np.ascontiguousarray(terms, np.int64)
    os.makedirs(directory, exist_ok=True)
    path = _file(directory, partition, version)
    # a temporary name unique to the attempt (two executors' pids may collide on a shared file
    # system); a duplicate attempt replaces the file whole, and the digest the router stamps
    # tells a partition which content it was routed by
    buf = io.BytesIO()
    np.save(buf, terms, allow_pickle=False)
    write_replacing(Path(path), buf.getvalue())
    for old in _versions(directory).get(partition, [])[:-KEEP_VERSIONS]:
        try:
            os.remove(_file(directory, partition, old))
        except FileNotFoundError:
            pass
    return digest(terms)


class MessageReadBack(Protocol):
    """Where a partition reads window messages back (the adapter's
    :class:`skype.spark.backfill.BackfillSource`): ``read(lo, hi)`` gives the messages at
    positions ``[lo, hi)`` as the router sees them, ``(MessageBatch, seq)``."""

    def read(self, lo: int, hi: int) -> tuple: ...


class SummaryTables:
    """The router's view: each partition's newest published version at or before a position."""

    def __init__(self, directory: str, num_partitions: int) -> None:
        self.directory = directory
        self.num_partitions = num_partitions
        self._cache: dict[str, tuple[tuple, np.ndarray, str]] = {}  # path -> (stat, terms, digest)
        self._union: tuple[tuple, np.ndarray] = ((), np.zeros(0, np.int64))  # stamps -> their live terms

    def at(self, lo: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        """For messages from position ``lo`` on: (stamp per partition, the sorted live terms of the
        partitions that have a table, which partitions route every term)."""
        versions = _versions(self.directory)
        stamps, parts, full = [], [], np.ones(self.num_partitions, bool)
        for q in range(self.num_partitions):
            usable = [v for v in versions.get(q, []) if v <= lo]
            loaded = self._read(_file(self.directory, q, usable[-1])) if usable else None
            if loaded is None:
                stamps.append(ALL)
                continue
            terms, dig = loaded
            stamps.append(summary_stamp(usable[-1], dig))
            parts.append(terms)
            full[q] = False
        if tuple(stamps) != self._union[0]:  # the union changes only with a new version
            self._union = (tuple(stamps), np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64))
        return stamps, self._union[1], full

    def _read(self, path: str) -> tuple[np.ndarray, str] | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        key = (st.st_mtime_ns, st.st_size)
        hit = self._cache.get(path)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        terms = _load(path)
        if terms is None:
            return None
        self._cache[path] = (key, terms, digest(terms))
        if len(self._cache) > 4 * KEEP_VERSIONS * self.num_partitions:
            self._cache.pop(next(iter(self._cache)))
        return terms, self._cache[path][2]


def keep_live_entries(terms: np.ndarray, parts: np.ndarray, live: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Which (message, term) entries route: the term's partition routes everything, or the term
    is live there."""
    keep = full[parts]
    if len(live) and not keep.all():
        pos = np.searchsorted(live, terms).clip(0, len(live) - 1)
        keep |= live[pos] == terms
    return keep


def routed_set(directory: str, partition: int, stamps: list[str]) -> np.ndarray | None:
    """The terms the router sent this partition's messages for: None when every row routed every
    term, else the intersection of the stamped versions (a version that cannot be read back as
    stamped counts as empty: the batch then backfills what it needs)."""
    sets = []
    for stamp in set(stamps):
        if stamp == ALL:
            continue
        version, dig = summary_parts(stamp)
        terms = _load(_file(directory, partition, version))
        sets.append(terms if terms is not None and digest(terms) == dig else np.zeros(0, np.int64))
    if not sets:
        return None
    out = sets[0]
    for s in sets[1:]:
        out = np.intersect1d(out, s)
    return out


@dataclass
class TermHolders:
    """How many replicas of this partition hold each term of its range (see module docstring)."""

    mode: str
    counts: dict[int, int] = field(default_factory=dict)
    published: str | None = None  # digest of the last version written (None: not known here)
    changed: bool = True  # a term gained its first holder or lost its last since the last publish

    def hold(self, terms: np.ndarray, delta: int) -> None:
        counts = self.counts
        for t in np.asarray(terms, np.int64).tolist():
            n = counts.get(t, 0) + delta
            if n > 0:
                if t not in counts:
                    self.changed = True
                counts[t] = n
            elif counts.pop(t, None) is not None:
                self.changed = True

    def lacking(self, terms: np.ndarray) -> np.ndarray:
        """The terms of ``terms`` nobody holds (a lookup per term, not a pass over the held ones)."""
        counts = self.counts
        return terms[np.array([t not in counts for t in terms.tolist()], bool)] if len(terms) else terms

    def terms(self) -> np.ndarray:
        return np.array(sorted(self.counts), np.int64)


@dataclass(frozen=True)
class Backfill:
    """What one batch reads back (:meth:`Coverage.cover`): rows of the read-back range ``src``
    (positions ``src_seq``) older than the batch (``old``: the engine must be rebuilt over share +
    them, the core's windows only append) and of the batch itself (``new``: they join its messages)."""

    src: MessageBatch
    src_seq: np.ndarray
    old: np.ndarray
    new: np.ndarray

    def rows(self) -> np.ndarray:
        return np.sort(np.concatenate([self.old, self.new]))

    def segment(self) -> bytes:
        """The backfill as one more window segment (a rebuild from durable state sees it)."""
        from skype.dskype import codec

        take = self.rows()
        return codec.pack_messages(self.src.take(take), self.src_seq[take])


class Coverage:
    """A partition's side of the summaries: who holds which term, what a batch must read back,
    and the version it publishes (see module docstring)."""

    def __init__(self, config) -> None:  # a skype.dskype.partition.PartitionConfig
        self.partition = config.partition
        self.ranges = config.activation  # term -> partition (ActivationConfig.term_partitions)
        self.directory = config.summary_dir
        self.source = config.backfill  # a skype.spark.backfill.BackfillSource
        self.window = int(config.window.size)
        self.holders = TermHolders(config.summary_mode)
        self._live: np.ndarray | None = None  # the terms last published (digest ``holders.published``)
        self._extra = np.zeros(0, np.int64)  # of which held by no replica: those of replicas due to wake

    def here(self, term_ids: np.ndarray) -> np.ndarray:
        """The terms of this partition's range."""
        t = np.asarray(term_ids, np.int64)
        return t[self.ranges.term_partitions(t) == self.partition]

    def hold(self, term_ids: np.ndarray, delta: int, *, record: bool, engine: bool) -> None:
        """A replica starts (+1) or stops (-1) holding its terms: in ``hosted`` mode when its record
        comes or goes (``record``), in ``active`` mode when it enters or leaves the engine."""
        if record if self.holders.mode == "hosted" else engine:
            self.holders.hold(self.here(term_ids), delta)

    def cover(self, due, woken_terms: list[np.ndarray], window_seqs: np.ndarray, batch, seq: np.ndarray,
              stamps: tuple, lo: int, hwm_seq: int) -> Backfill | None:
        """What a partition must read back so that its window share holds every window message of
        the terms this batch needs (before its wakes, whose records' terms are ``woken_terms``, and
        its due commands ``due`` apply); ``window_seqs``: the share's positions.  None: nothing."""
        from skype.dskype.codec import OP_SUB

        subscribes = [j for j in range(len(due)) if due.op[j] == OP_SUB]
        pieces = [due.subs.terms.row(j)[0] for j in subscribes]
        if self.holders.mode == "active":
            pieces += list(woken_terms)
        fresh = self.here(np.unique(np.concatenate(pieces)) if pieces else np.zeros(0, np.int64))
        missing_old = self.holders.lacking(fresh)
        tables = [st for st in stamps if st != ALL]
        if any(summary_digest(st) != self.holders.published for st in tables):
            self.holders.published = None  # the router read another table than this one wrote: write again
        if tables and self.holders.published is not None and not self.holders.changed and self._live is not None:
            # the router used what this partition published, which holds every held term
            missing_new = np.setdiff1d(fresh, self._live)
        else:
            routed = routed_set(self.directory, self.partition, list(stamps))
            missing_new = (np.zeros(0, np.int64) if routed is None
                           else np.setdiff1d(np.union1d(self.holders.terms(), fresh), routed))
        if (len(missing_old) == 0 or lo == 0) and (len(missing_new) == 0 or hwm_seq < lo):
            return None
        src, src_seq = self.source.read(max(0, lo - self.window), hwm_seq + 1)
        rows = np.repeat(np.arange(len(src), dtype=np.int64), src.terms.lengths())
        have = np.sort(np.concatenate([window_seqs, seq]))
        take = backfill_rows(src_seq, rows, np.asarray(src.terms.ids, np.int64), lo, missing_old, missing_new, have)
        if len(take) == 0:
            return None
        return Backfill(src, src_seq, take[src_seq[take] < lo], take[src_seq[take] >= lo])

    def publish(self, hwm_seq: int, waking: list[np.ndarray]) -> int:
        """Write the live terms (held, and those of the replicas due to wake at the next batch's
        start, ``waking``) as version ``hwm_seq + 1`` when they changed; returns their number."""
        holders = self.holders
        extra = np.zeros(0, np.int64)
        if holders.mode == "active" and waking:
            extra = holders.lacking(self.here(np.unique(np.concatenate(waking))))
        if (self._live is not None and holders.published is not None and not holders.changed
                and np.array_equal(extra, self._extra)):
            return len(self._live)  # the same terms as the version the router has
        live = np.union1d(holders.terms(), extra)
        dig = digest(live)
        if dig != holders.published:
            publish(self.directory, self.partition, hwm_seq + 1, live)
            holders.published = dig
        self._live, self._extra, holders.changed = live, extra, False
        return len(live)


def backfill_rows(seq: np.ndarray, entry_rows: np.ndarray, entry_terms: np.ndarray, lo: int,
                  missing_old: np.ndarray, missing_new: np.ndarray, have_seq: np.ndarray) -> np.ndarray:
    """Rows of a read-back range to backfill: those before ``lo`` with a term in ``missing_old``,
    those from ``lo`` on with a term in ``missing_new``, minus the positions already here
    (``have_seq``, sorted).  ``entry_rows``/``entry_terms``: the range's (row, term) entries."""
    before = seq[entry_rows] < lo
    wanted = np.where(before, np.isin(entry_terms, missing_old), np.isin(entry_terms, missing_new))
    rows = np.unique(entry_rows[wanted])
    if len(rows) and len(have_seq):
        pos = np.searchsorted(have_seq, seq[rows]).clip(0, len(have_seq) - 1)
        rows = rows[have_seq[pos] != seq[rows]]
    return rows
