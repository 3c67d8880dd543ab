"""``skype.Engine``: the product API, a thin facade over the Cython core.

Inputs are validated once here (see :class:`skype.api.EngineBase`); the core then runs on typed
arrays without the GIL.  Choose the subscription index and the result buffer:

* ``index="cone"`` (default): per-term k-d trees over (x, y, rho) bounded by each posting's
  cone, with a pair index for subscriptions sharing two terms with the message
  (``docs/cone-index.md``); ``"blocks"``: the keyword-first block index: per-term posting lists
  in alpha-bands of blocks with bound headers, fat postings, no candidate hash table
  (``docs/engine.md``); ``"igpt"``: the paper's IGPT quadtree with individual and group pruning
  (spec §3); ``"ipt"`` is IGPT without group pruning (the paper's IPT); ``"ciq"`` the CIQ
  baseline.
* ``buffer="cskyband"`` (default): the cost-based k-skyband (spec §4.3); ``"skyband"``
  (Mouratidis: theta = ratio * kScore), ``"kmax"`` (Yi et al.) or ``"exact"`` (exact top-k).

Every combination returns exactly the reference engine's results.

>>> from skype import Engine, Subscription, Message
>>> engine = Engine(window=100)
>>> engine.subscribe(Subscription(id=1, x=2.35, y=48.86, k=2, alpha=0.5, text="coffee"))
[]
>>> engine.publish(Message(id=1, x=2.34, y=48.85, text="coffee near the louvre"))
[ResultChange(sub_id=1, entered=(1,), left=())]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Unpack

import numpy as np

from skype import validate
from skype.api import ChangeLog, EngineBase
from skype.engine_settings import EngineKeywords, EngineOptions
from skype.engine_state import ENGINE_STATE_VERSION, checked_state
from skype.errors import InputError, invalid_choice
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix
from skype._core.engine import CoreEngine
from skype._core.enginestats import engine_stats
from skype._core.blockindex import BlockIndex
from skype._core.igpt import IGPTIndex
from skype._core.subindex import SubTable

if TYPE_CHECKING:
    from skype.querykinds import CoreQueryKinds

INDEXES = ("blocks", "igpt", "ipt", "ciq", "cone")
BUFFERS = ("cskyband", "skyband", "kmax", "exact")
MESSAGE_INDEXES = ("lists", "quadtree")
RULES = ("cell", "group", "early", "entry", "prefix", "spatial", "exact_spatial", "unseen")
BLOCK_RULES = ("band", "block", "entry")  # the block index's rules (alpha-band, block header, posting)
BARRIERS = ("stationary", "window", "factor")
TERM_TREES = ("lazy", "eager")

CIQ_PARAMS = {"budget": 16, "max_depth": 12}  # cover cells per subscription, quadtree depth
# the cone trees: postings per leaf, and a term's tree is rebuilt once its tail and dead postings
# pass tail_fraction of its postings and tail_min
CONE_PARAMS = {"leaf": 8, "tail_fraction": 0.25, "tail_min": 64}

DEFAULT_COST = {
    "c_ins": 1.0,  # cost of touching one buffer entry on an insertion (the unit)
    "c_del": 1.0,  # cost of deleting an expired entry
    "query_cost": 10.0,  # cost of one message-index step (heap pop), in c_ins units (docs/results/2026-11-29-expiry.md)
    "barrier": "stationary",  # reflecting barrier of the random walk: n0, N, or factor * n0
    "barrier_factor": 2.0,
    "stop_after": 3,  # stop the threshold scan after this many consecutive cost increases
    "nmax_factor": 20,  # ... or after nmax_factor * k messages
    "refresh_factor": 3.0,  # re-evaluate a complete (theta = 0) buffer beyond this many times k
}
TERM_ID_LIMIT = 2**32 - 1  # 32-bit term ids; the largest value marks "no term" in the block index
REGISTRATIONS = ("search", "replay")  # how bulk registration finds the runs (docs/engine.md); replay: the oracle
BULK_LEAF_FACTOR = 8  # leaf capacity of bulk registration's temporary IGPT/IPT index, times leaf_capacity


def _options_of(options: EngineOptions | Mapping[str, Any] | None, keywords: Mapping[str, Any]) -> EngineOptions:
    """The engine's options: an :class:`EngineOptions`, or a mapping of its field names (an
    unknown name: E023), with the keyword front's changes on top (an unknown keyword raises
    ``TypeError``, as for any function)."""
    if options is None:
        opts = EngineOptions()
    elif isinstance(options, EngineOptions):
        opts = options
    elif isinstance(options, Mapping):
        for name in options:
            if name not in EngineOptions.names():
                raise invalid_choice("engine option", name, EngineOptions.names())
        opts = EngineOptions(**options)
    else:
        raise InputError("E023", what="engine options", expected="an EngineOptions or a mapping", value=options)
    if keywords:
        unknown = sorted(set(keywords) - set(EngineOptions.names()))
        if unknown:
            raise TypeError(f"Engine() got an unexpected keyword argument {unknown[0]!r}")
        opts = opts.with_changes(**keywords)
    return opts


def _cone_params(cone: Mapping[str, object] | None) -> dict:
    """The cone trees' parameters (CONE_PARAMS), validated."""
    params: dict[str, object] = dict(CONE_PARAMS)
    for key, value in (cone or {}).items():
        if key not in CONE_PARAMS:
            raise invalid_choice("cone parameter", key, CONE_PARAMS)
        params[key] = value
    leaf = _positive("cone leaf", params["leaf"], int, 1, strict=False)
    if leaf > 1024:
        raise InputError("E023", what="cone leaf", expected="at most 1024", value=leaf)
    return {"leaf": leaf, "tail_min": _positive("cone tail_min", params["tail_min"], int, 0, strict=False),
            "tail_fraction": _positive("cone tail_fraction", params["tail_fraction"])}


def _positive(name: str, value, kind=float, minimum=0.0, strict=True):
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise InputError("E023", what=name, expected=f"a {kind.__name__}", value=value)
    if (value <= minimum) if strict else (value < minimum):
        raise InputError("E023", what=name, expected=f"{'>' if strict else '>='} {minimum}", value=value)
    return kind(value)


class Engine(EngineBase):
    """Top-k spatial-keyword pub/sub over a count (``window``) or time (``window_seconds``)
    window.

    Built from an :class:`~skype.engine_settings.EngineOptions` (or a mapping of its field
    names) beside :class:`~skype.api.EngineBase`'s window, bounds and vocabulary; its fields may
    also be given as keywords (``Engine(window=100, index="igpt")``), a thin front over the same
    options.  ``engine.options`` holds them.  The options:

    index, buffer
        see the module docstring.
    block_size, bands, column_test
        the block index: entries per block (default 64), alpha-bands per posting list
        (default 8), and whether postings are first tested branch-free over a column mirror of
        the bands kept for it (default False: measured slower at 100k subscriptions).
    leaf_capacity
        IGPT/IPT: subscriptions per quadtree leaf before it splits (default 1000).
    groups
        IGPT: alpha-groups per posting list (default 10).
    pruning
        ``{rule: bool}`` to switch rules off individually.  The block index: ``band`` (a whole
        alpha-band by its header), ``block`` (a block by its header) and ``entry`` (a posting by
        its own f32 bound).  IGPT: ``cell`` (Lemma 6),
        ``group`` (Thm 5.3), ``early`` (Thm 5.4), ``entry`` (Lemma 4 per member from the posting
        entry's stored a_s, b_s), ``prefix`` (Thm 5.1), ``spatial`` (Defs 6-8),
        ``unseen`` (Thm 5.2), and ``exact_spatial`` (the individual tests use the exact spatial
        similarity, from the location they load anyway, in place of the bound of Def. 8).  All
        on by default (``ipt``: group, early and entry off).
    kmax, skyband_ratio
        parameters of the kmax (default 60) and Skyband (default 0.8) buffers.
    cost
        cSkyband cost-model parameters (see ``DEFAULT_COST``).
    ciq
        CIQ parameters: ``budget`` (cover cells per subscription, default 16) and
        ``max_depth`` of its quadtree (default 12).
    cone
        cone trees: ``leaf`` (postings per leaf, default 8); a term's tree is rebuilt once its
        tail of new postings and its dead ones pass ``tail_fraction`` (default 0.25) of its
        postings and ``tail_min`` (default 64).
    message_index
        the window's index for re-evaluations: ``lists`` (one list per term in arrival order,
        so an expiry pops list heads) or ``quadtree`` (one quadtree per term, pruning by space
        as well, so a re-evaluation reads about half as many entries, but costlier to keep).
        Default: ``quadtree`` for the ``exact`` buffer, which re-evaluates whenever a top-k
        member expires, and ``lists`` for the others, which rarely do (``docs/engine.md``).
    message_leaf_capacity
        ``quadtree``: messages per leaf before it splits (default 64).
    micro_batch
        messages whose subscriptions are found together (default 1: one at a time, at most
        4096); the block index then reads each posting list once for all the batch's messages
        holding its term.  Results and change logs are the same for every size.
    reverse_map
        True (default): the window keeps, per message, the subscriptions that buffered it.
        False: no such list; an expiring message is disseminated again against the current
        thresholds to find them (less memory, one more dissemination per expiry).
    exact_holders
        True (default): a buffer that drops a message clears its reverse-map entry, so an
        expiry visits only the buffers that still hold the message (``docs/engine.md``).
        False: entries stay until the message expires, and expiry checks every one.
    registration
        how a registration batch of at least 2,000 subscriptions into a non-empty window finds
        each subscription's first messages: ``"search"`` (default) a static index of the window
        per subscription (per-term k-d trees), or ``"replay"`` the window through a temporary
        subscription index (the oracle the search is tested against, kept as a choice)
        (``docs/engine.md``, "Registration by search").  The buffers are identical.
    timers
        per-phase clocks in ``stats()["phases"]["seconds"]`` (enter, disseminate, scan, verify,
        admit, expire, re-evaluate, flush).  Off by default: they cost two clock reads a phase.
        The counters in ``stats()["phases"]["counts"]`` are always kept.
    snapshots
        True: keep the query window (its own message index) that serves the range, knn and
        terms kinds and every snapshot query (``docs/queries.md``).  False (default): topk
        subscriptions only, without that window's cost (about 15% of the time per message at
        100k subscriptions, and a second message index); the other kinds are refused (E050).
        With it, the top-k core keeps no window of its own until the first topk subscription,
        which builds it from the query window's messages; and the query window keeps its
        per-term trees only once something reads them (``docs/queries.md``).
    term_trees
        ``"lazy"`` (default): the query window's per-term trees are built from the window by the
        first kNN or terms subscription or snapshot query that reads them (range-only traffic
        never does; the build costs about 11 s over a 1M window); ``"eager"``: kept from the
        start (inputs with snapshot queries: no such pause at the first one).
    query_grid, knn_buffer
        cells per side of the grid index of range and terms subscriptions (default 64), and
        the kNN buffer's capacity in multiples of k (default 2).
    """

    def __init__(
        self,
        options: EngineOptions | Mapping[str, Any] | None = None,
        *,
        window: int | None = None,
        window_seconds: float | None = None,
        bounds=None,
        vocabulary=None,
        **keywords: Unpack[EngineKeywords],
    ) -> None:
        kwargs = {} if bounds is None else {"bounds": bounds}
        super().__init__(window=window, window_seconds=window_seconds, vocabulary=vocabulary, **kwargs)
        self.options = opts = _options_of(options, keywords)
        index, buffer, message_index, registration = opts.index, opts.buffer, opts.message_index, opts.registration
        block_size, bands, leaf_capacity, groups = opts.block_size, opts.bands, opts.leaf_capacity, opts.groups
        kmax, skyband_ratio, micro_batch, theta_refresh = opts.kmax, opts.skyband_ratio, opts.micro_batch, opts.theta_refresh
        message_leaf_capacity, cell_walk, query_grid = opts.message_leaf_capacity, opts.cell_walk, opts.query_grid
        pruning, cost, ciq, term_trees = opts.pruning, opts.cost, opts.ciq, opts.term_trees
        column_test, reverse_map, exact_holders, timers = opts.column_test, opts.reverse_map, opts.exact_holders, opts.timers
        snapshots, knn_buffer, cone = opts.snapshots, opts.knn_buffer, opts.cone
        if index not in INDEXES:
            raise invalid_choice("index", index, INDEXES)
        if buffer not in BUFFERS:
            raise invalid_choice("buffer", buffer, BUFFERS)
        if message_index is None:
            message_index = "quadtree" if buffer == "exact" else "lists"
        if message_index not in MESSAGE_INDEXES:
            raise invalid_choice("message_index", message_index, MESSAGE_INDEXES)
        self.index_kind, self.buffer_kind = index, buffer
        known_rules = BLOCK_RULES if index == "blocks" else () if index == "cone" else RULES
        rules = {rule: True for rule in known_rules}
        if index == "ipt":  # the paper's IPT: no alpha-partition (spec §3.5) at all
            rules["group"] = rules["early"] = rules["entry"] = False
        for rule, on in (pruning or {}).items():
            if rule not in known_rules:
                raise invalid_choice("pruning rule", rule, known_rules)
            rules[rule] = bool(on)
        self.pruning = rules
        walks = {"never": 0, "always": 1, "auto": 2}
        if cell_walk not in walks:
            raise invalid_choice("cell_walk", cell_walk, walks)
        costs = dict(DEFAULT_COST)
        for key, value in (cost or {}).items():
            if key not in DEFAULT_COST:
                raise invalid_choice("cost parameter", key, DEFAULT_COST)
            costs[key] = value
        if costs["barrier"] not in BARRIERS:
            raise invalid_choice("barrier", costs["barrier"], BARRIERS)
        for key in ("c_ins", "c_del", "query_cost", "refresh_factor"):
            costs[key] = _positive(key, costs[key])
        costs["barrier_factor"] = _positive("barrier_factor", costs["barrier_factor"], minimum=1.0, strict=False)
        costs["stop_after"] = _positive("stop_after", costs["stop_after"], int, 1, strict=False)
        costs["nmax_factor"] = _positive("nmax_factor", costs["nmax_factor"], int, 1, strict=False)
        self.cost = costs
        self.params = {
            "block_size": _positive("block_size", block_size, int, 1, strict=False),
            "bands": _positive("bands", bands, int, 1, strict=False),
            "leaf_capacity": _positive("leaf_capacity", leaf_capacity, int, 1, strict=False),
            "groups": _positive("groups", groups, int, 1, strict=False),
            "kmax": _positive("kmax", kmax, int, 1, strict=False),
            "skyband_ratio": _positive("skyband_ratio", skyband_ratio),
            "message_leaf_capacity": _positive("message_leaf_capacity", message_leaf_capacity, int, 2, strict=False),
            "theta_refresh": _positive("theta_refresh", theta_refresh, strict=False),
            "message_index": message_index,
            "micro_batch": _positive("micro_batch", micro_batch, int, 1, strict=False),
        }
        if not 4 <= self.params["block_size"] <= 1024:
            raise InputError("E023", what="block_size", expected="in [4, 1024]", value=block_size)
        if self.params["bands"] > 64:
            raise InputError("E023", what="bands", expected="at most 64", value=bands)
        if self.params["groups"] > 63:
            raise InputError("E023", what="groups", expected="at most 63", value=groups)
        if self.params["micro_batch"] > 4096:
            raise InputError("E023", what="micro_batch", expected="at most 4096", value=micro_batch)
        if not 0.0 < self.params["skyband_ratio"] <= 1.0:
            raise InputError("E023", what="skyband_ratio", expected="in (0, 1]", value=skyband_ratio)
        b = self.bounds
        self._table = table = SubTable()
        params, theta_refresh = self.params, self.params["theta_refresh"]
        if index == "ciq":
            from skype._core.ciq import CIQIndex

            ciq_params = dict(CIQ_PARAMS)
            for key, value in (ciq or {}).items():
                if key not in CIQ_PARAMS:
                    raise invalid_choice("ciq parameter", key, CIQ_PARAMS)
                ciq_params[key] = _positive(key, value, int, 1, strict=False)
            if ciq_params["max_depth"] > 28:
                raise InputError("E023", what="ciq max_depth", expected="at most 28", value=ciq_params["max_depth"])
            self.params["ciq"] = ciq_params

            def make_index(leaf_factor=1):
                return CIQIndex(table, b.minx, b.miny, b.maxx, b.maxy, b.max_dist,
                                theta_refresh=theta_refresh, **ciq_params)
        elif index == "blocks":
            def make_index(leaf_factor=1):
                return BlockIndex(
                    table, b.minx, b.miny, b.maxx, b.maxy, b.max_dist,
                    block_size=params["block_size"], bands=params["bands"],
                    theta_refresh=theta_refresh, column_test=bool(column_test), **rules,
                )
        elif index == "cone":
            from skype._core.coneindex import ConeIndex

            cone_params = _cone_params(cone)
            self.params["cone"] = cone_params

            def make_index(leaf_factor=1):
                return ConeIndex(table, b.max_dist, leaf=cone_params["leaf"], theta_refresh=theta_refresh,
                                 tail_fraction=cone_params["tail_fraction"], tail_min=cone_params["tail_min"])
        else:
            def make_index(leaf_factor=1):
                return IGPTIndex(
                    table, b.minx, b.miny, b.maxx, b.maxy, b.max_dist,
                    leaf_capacity=params["leaf_capacity"] * leaf_factor, ngroups=params["groups"],
                    cell_walk=walks[cell_walk], theta_refresh=theta_refresh, **rules,
                )
        # the engine's index; bulk registration builds a temporary one of the same kind (IGPT
        # and IPT with leaves BULK_LEAF_FACTOR times larger: fewer, longer posting lists)
        self._index = make_index()
        buffer_params = {key: costs[key] for key in DEFAULT_COST}
        buffer_params.update(kmax=self.params["kmax"], skyband_ratio=self.params["skyband_ratio"])
        self._core = CoreEngine(
            b.as_tuple(), b.max_dist, self.window or 0, self.window_seconds or 0.0, self._index, self._table,
            buffer, buffer_params, self.params["message_leaf_capacity"], lambda: make_index(BULK_LEAF_FACTOR),
            bool(reverse_map), message_index, bool(exact_holders),
        )
        self._core.set_micro_batch(self.params["micro_batch"])
        if registration not in REGISTRATIONS:
            raise invalid_choice("registration", registration, REGISTRATIONS)
        self.params["registration"] = registration
        self._core.set_registration(registration)
        self._core.set_timers(bool(timers))
        self.params["query_grid"] = _positive("query_grid", query_grid, int, 1, strict=False)
        self.params["knn_buffer"] = _positive("knn_buffer", knn_buffer, int, 1, strict=False)
        if self.params["query_grid"] > 4096:
            raise InputError("E023", what="query_grid", expected="at most 4096", value=query_grid)
        # the top-k core's window is kept from the first topk subscription on; before it, the
        # query window holds the same messages and the core's is built from it (_wake_core)
        self._core_live = not snapshots
        self._kind_queries: CoreQueryKinds | None = None
        if term_trees not in TERM_TREES:
            raise invalid_choice("term_trees", term_trees, TERM_TREES)
        self.params["term_trees"] = term_trees
        if snapshots:
            self._queries = self._kind_queries = self._make_query_kinds()

    def _make_query_kinds(self) -> CoreQueryKinds:
        from skype.querykinds import CoreQueryKinds

        return CoreQueryKinds(self.bounds, self.vocabulary, self.window, self.window_seconds,
                              grid=self.params["query_grid"], knn_factor=self.params["knn_buffer"],
                              leaf_capacity=self.params["message_leaf_capacity"], term_trees=self.params["term_trees"])

    @property
    def queries_open(self) -> bool:
        """Whether the query window is kept (``snapshots=True``, or :meth:`open_queries` called)."""
        return self._kind_queries is not None

    def open_queries(self, window: MessageBatch) -> None:
        """Keep the query window from now on, in an engine made without it (``snapshots=False``):
        built from ``window``, the messages of the engine's window oldest first, as they were
        published (the caller's copy: the service keeps one).  Both windows slide by the same
        rule, so from here the engine is one made with ``snapshots=True`` that saw the same
        stream: every snapshot query and every kind answers the same (the service opens it
        before its first query or subscription of another kind; ``serve --queries lazy``).
        A ``window`` that is not the engine's window is refused (E023), changing nothing."""
        if self._kind_queries is not None:
            return
        held = self._core.window_ids()
        if len(window) != len(held) or not np.array_equal(np.sort(window.ids), np.sort(held)):
            raise InputError("E023", what="open_queries() window", expected="the engine's window, oldest first",
                             value=f"{len(window)} messages against {len(held)}")
        kinds = self._make_query_kinds()
        for start in range(0, len(window), 10_000):
            kinds.publish(window.slice(start, min(start + 10_000, len(window))))
        if self.window_seconds is not None and self._clock > -np.inf:
            kinds.advance(self._clock)
        self._queries = self._kind_queries = kinds

    # ------------------------------------------------------------------ EngineBase
    def _reserve_terms(self, terms: TermMatrix) -> None:
        if len(terms.ids) and int(terms.ids.max()) >= TERM_ID_LIMIT:
            raise InputError("E027", detail=f"term id {int(terms.ids.max())} exceeds the core's 32-bit range")

    def _known_subscriptions(self, ids: np.ndarray) -> np.ndarray:
        return self._core.has_subscriptions(np.ascontiguousarray(ids, dtype=np.int64))

    def _window_has(self, ids: np.ndarray) -> np.ndarray:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if self._kind_queries is not None and not self._core_live:
            return self._kind_queries.window_has(ids)
        return self._core.window_has(ids)

    def _wake_core(self) -> None:
        """Before the first topk subscription of an engine with the query window: the top-k
        core's window (and its message index) from the query window's messages, oldest first.
        Both windows slide by the same rule, so they hold the same messages; replayed into an
        engine without subscriptions, none of them expires and no change is reported."""
        if self._core_live or self._kind_queries is None:
            return
        batch = self._kind_queries.window_batch()
        if len(batch):
            t = batch.terms
            self._core.publish_batch(batch.ids, batch.x, batch.y, batch.t, t.indptr, t.ids.astype(np.uint32),
                                     t.weights)
        self._core_live = True

    def _subscribe_batch(self, batch: SubscriptionBatch) -> None:
        if len(batch) == 0:  # no topk subscription: the core's window stays asleep
            return
        self._wake_core()
        if len(batch) > self._table.capacity():
            raise InputError("E023", what="number of subscriptions", expected=f"at most {self._table.capacity()} more",
                             value=len(batch))
        if len(batch.terms.lengths()) and batch.terms.lengths().max() > 1000:
            row = int(np.argmax(batch.terms.lengths() > 1000))
            raise InputError("E023", what="terms of a subscription", expected="at most 1000",
                             value=int(batch.terms.lengths()[row]), record_id=int(batch.ids[row]))
        t = batch.terms
        self._core.subscribe_batch(batch.ids, batch.x, batch.y, batch.k, batch.alpha, t.indptr,
                                   t.ids.astype(np.uint32), t.weights)

    def _unsubscribe(self, sub_id: int) -> None:
        self._core.unsubscribe(sub_id)

    def _publish_batch(self, batch: MessageBatch) -> ChangeLog:
        if not self._core_live:  # no topk subscription yet: the query window holds the messages
            return ChangeLog.empty()
        t = batch.terms
        at, sub, msg, entered = self._core.publish_batch(batch.ids, batch.x, batch.y, batch.t, t.indptr,
                                                         t.ids.astype(np.uint32), t.weights)
        return ChangeLog(at, sub, msg, entered)

    def _advance(self, t: float) -> ChangeLog:
        if not self._core_live:
            return ChangeLog.empty()
        return ChangeLog(*self._core.advance(t))

    def _topk(self, sub_id: int) -> tuple[np.ndarray, np.ndarray]:
        return self._core.topk(sub_id)

    def _topk_arrays(self, sub_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._core.topk_arrays(sub_ids)

    def _topk_ranks(self, subs: np.ndarray, msgs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._core.topk_ranks(subs, msgs)

    def _topn(self, sub_id: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self._core.topn(sub_id, n)

    def set_floors(self, sub_ids, floors, side_list: int = 32) -> ChangeLog:
        """:meth:`EngineBase.set_floors`, kept by the buffers (``set_floor`` in buffers.pyx)."""
        ids, values = self._floor_inputs(sub_ids, floors)
        side_list = _positive("side_list", side_list, int, 0, strict=False)
        if not self._core_live or len(ids) == 0:
            return ChangeLog.empty()
        return ChangeLog(*self._core.set_floors(ids, values, side_list))

    def _thresholds(self, sub_ids: np.ndarray) -> np.ndarray:
        known = self._known_subscriptions(sub_ids)
        if not known.all():
            sid = int(sub_ids[np.argmin(known)])
            raise InputError("E020", id=sid, record_id=sid)
        return self._core.thresholds(np.ascontiguousarray(sub_ids, dtype=np.int64))

    def subscription_ids(self) -> np.ndarray:
        return self._core.subscription_ids()

    def window_ids(self) -> np.ndarray:
        if self._kind_queries is not None and not self._core_live:
            return self._kind_queries.window_ids()
        return self._core.window_ids()

    def stats(self) -> dict:
        s = engine_stats(self._core)
        s["engine"] = f"core ({self.index_kind}, {self.buffer_kind})"
        s["query_subscriptions"] = len(self._kinds)
        if self._queries is not None:
            s["queries"] = self._queries.stats()
        s["core_window"] = "kept" if self._core_live else "not yet (no topk subscription)"
        if not self._core_live:  # the messages went through the query window only
            q = s["queries"]
            s.update(arrivals=q["arrivals"], expirations=q["expirations"], window_size=q["query_window_size"])
        arena = s["buffer_arena"]
        s["memory_parts"] = {  # the components of memory_bytes that the layouts work on
            "buffer_records": s["memory_bytes"]["buffers"] - arena["page_bytes"],
            "buffer_entries_held": s["buffered_entries"] * arena["entry_bytes"],
            "buffer_class_rounding": arena["live_bytes"] - s["buffered_entries"] * arena["entry_bytes"],
            "buffer_page_slack": arena["page_bytes"] - arena["live_bytes"],
            **{f"window_{k}": v for k, v in self._core.window_memory_parts().items()},
            "registration_index_peak": s["bulk_registration"]["search"].get("index_bytes", 0),
        }
        s["index_bytes_per_subscription"] = (
            (s["memory_bytes"]["subscription_index"] + s["memory_bytes"]["subscription_table"]) / s["subscriptions"]
            if s["subscriptions"] else 0.0
        )
        return s

    @property
    def subscription_index(self) -> Any:
        """The core's subscription index (the Cython object of ``index``): for the benches and
        tests that drive a scan of the index alone.  Results come from the engine's verbs."""
        return self._index

    @property
    def subscription_table(self) -> Any:
        """The core's subscription table (``skype._core.subindex.SubTable``), which a scan-only
        index (the cone scan) is built over; as :attr:`subscription_index`, for benches and tests."""
        return self._table

    def window_memory_parts(self) -> dict[str, int]:
        """The top-k core's window store in bytes by component (messages, terms, holders...):
        ``stats()["memory_bytes"]`` gives the whole window as one figure."""
        return self._core.window_memory_parts()

    # ------------------------------------------------------------------ engine state
    def export_state(self) -> dict[str, np.ndarray]:
        """The top-k subscriptions as registered, with their result buffers, as numpy arrays
        (a service snapshot keeps them, so that a restart need not register them again:
        :meth:`import_state`).  Messages are named by their position in the window, so the
        state fits an engine whose window holds the same messages in the same order
        (``window_ids``).  Subscriptions of the other kinds are not included: they are
        registered again.  Versioned; the arrays: :data:`skype.engine_state.STATE_ARRAYS`."""
        (ids, x, y, k, alpha, indptr, terms, weights), bufs = self._core.export_state()
        (buf_k, complete, cq, refresh_at, p_theta, age, admits, retune_at, theta,
         entry_indptr, entry_pos, entry_score, entry_dc) = bufs
        until = np.array([self._until.get(int(sid), np.nan) for sid in ids.tolist()], np.float64) \
            if self._until else np.full(len(ids), np.nan)
        return {"version": np.array([ENGINE_STATE_VERSION], np.int64),
                "buffer": np.array([BUFFERS.index(self.buffer_kind)], np.int64), "buffer_params": self.buffer_params(),
                "window_ids": self.window_ids(),
                "ids": ids, "x": x, "y": y, "k": k, "alpha": alpha, "until": until,
                "term_indptr": indptr, "term_ids": terms, "term_weights": weights,
                "complete": complete, "cq": cq, "refresh_at": refresh_at, "p_theta": p_theta, "age": age,
                "admits": admits, "retune_at": retune_at, "theta": theta, "entry_indptr": entry_indptr,
                "entry_pos": entry_pos, "entry_score": entry_score, "entry_dc": entry_dc}

    def buffer_params(self) -> np.ndarray:
        """What shapes a result buffer besides its kind, as one array (an exported state fits
        an engine with the same): kmax, the Skyband ratio and the cost model's parameters
        (the barrier as its index in ``BARRIERS``)."""
        c = self.cost
        return np.array([self.params["kmax"], self.params["skyband_ratio"], c["c_ins"], c["c_del"], c["query_cost"],
                         BARRIERS.index(c["barrier"]), c["barrier_factor"], c["stop_after"], c["nmax_factor"],
                         c["refresh_factor"]], np.float64)

    def import_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Register the top-k subscriptions of :meth:`export_state` with their buffers as they
        were, instead of searching the window for them: the results, thresholds and buffers
        are those of the engine that exported them.  The engine must hold none of them, use
        the same buffer kind and parameters (:meth:`buffer_params`), and its window must hold the exported window's messages in the
        same order.  Everything is checked first; a state that does not fit raises E160 (an
        :class:`InputError`) having registered nothing."""
        arrays = checked_state(state, BUFFERS.index(self.buffer_kind), self.buffer_params(), len(self.vocabulary))
        ids = arrays["ids"]
        if len(ids) == 0:  # nothing to register (whatever its window)
            return
        held = self.window_ids()
        if not np.array_equal(held, arrays["window_ids"]):
            raise InputError("E160", detail=f"its window ({len(arrays['window_ids'])} messages) is not the engine's "
                                            f"({len(held)} messages, oldest first)")
        known = self._known_subscriptions(ids) | np.isin(ids, np.fromiter(self._kinds, np.int64, len(self._kinds)))
        if known.any():
            sid = int(ids[np.argmax(known)])
            raise InputError("E007", id=sid, record_id=sid)
        if len(ids) > self._table.capacity():
            raise InputError("E160", detail=f"{len(ids)} subscriptions, room for {self._table.capacity()}")
        self._wake_core()
        self._core.import_state((ids, arrays["x"], arrays["y"], arrays["k"], arrays["alpha"], arrays["term_indptr"],
                                 arrays["term_ids"], arrays["term_weights"]),
                                (arrays["k"], arrays["complete"], arrays["cq"], arrays["refresh_at"],
                                 arrays["p_theta"], arrays["age"], arrays["admits"], arrays["retune_at"],
                                 arrays["theta"], arrays["entry_indptr"], arrays["entry_pos"],
                                 arrays["entry_score"], arrays["entry_dc"]))
        for i in np.flatnonzero(~np.isnan(arrays["until"])).tolist():
            self._set_until(int(ids[i]), float(arrays["until"][i]))

    def buffer_state(self, sub_id: int) -> object:
        """A topk subscription's whole buffer as the core holds it (entries, threshold, flags): the
        tests and the registration bench compare buffers built different ways, which must be
        identical.  A diagnostic, not a result: :meth:`topk` is the answer."""
        sid = validate.check_id(sub_id)
        if not self._known_subscriptions(np.array([sid], np.int64))[0]:
            raise InputError("E020", id=sid, record_id=sid)
        return self._core.buffer_state(sid)

    def check_invariants(self) -> bool:
        """Verify the subscription index's structural invariants (tests and debugging): every
        index kind checks its own and raises AssertionError naming the first violation."""
        return self._index.check_invariants()
