"""Scan-only prototype of a posting scan bounded by the cone (issue 35, step 2): postings read per
message, counted against today's block index on the same engine state.

The cone (proved in docs/engine.md, "The cone of a single-term posting").  A subscription s that
shares exactly one term t with the message m, 0 < alpha < 1, qualifies (ST(s, m) >= theta_s) iff

    d(s, m) <= D * lam * (w_m - rho),   rho = kappa / w,  kappa = (theta - alpha) / (1 - alpha),
                                        lam = w * (1 - alpha) / alpha,

with w = w(s, t), w_m = w(m, t), D = MaxDist.  alpha = 0 is the cone with lam = +inf (qualifies iff
w_m >= rho = theta / w); alpha = 1 is no cone (qualifies iff d <= D * (1 - theta)) and its postings
stay in a flat per-term list read whole.  A set of postings with rho >= rho_min, lam <= lam_max and
locations in a box R holds none that qualifies when w_m < rho_min or MINDIST(m, R) > D * lam_max *
(w_m - rho_min): the pruning rule of every variant below.  Subscriptions sharing two or more terms
with m are not bounded by it: a pair index ((t, u) -> the subscriptions holding both) finds them.

Variants (counts, deterministic; the engine is prepared the paper's way and not changed):

* ``today``: the block index's ``scan_only`` (postings it examines one by one);
* ``A``: the low alpha-bands (alpha < 1/2) sorted by rho in blocks of ``--block`` with an early stop
  at the first block whose rho_min > w_m, the high bands as today, plus the pair index;
* ``A0``: A without the pair index: in the low bands only the postings whose term is their
  subscription's last (rest = 0: at a first meeting it shares only that term) are rho-sorted with
  the early stop; the others are all read (an upper bound of today's work on them);
* ``C``: one k-d tree per term over (x, y, rho) (splits on the widest of x, y, ``--rho-scale`` * rho;
  leaves of ``--leaf``), nodes holding the box, rho_min and lam_max, plus the pair index.

Exactness is checked on every message: each variant's found set (postings read that share one term
and score >= theta, and the pair index's hits that score >= theta) must equal the brute force's set
of subscriptions scoring >= theta.  ``B`` (cone headers on small blocks) is not built here.

    python bench/scan_cone.py --num-subs 200000 --window 200000 --measured 2000
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field

import numpy as np

RHO_SPLIT_CLIP = (-1.0, 2.0)   # the split key only: rho outside it splits like its end
NODE_SLACK = 1e-9              # allowance of the float64 node tests (errors ~1e-15), in rho units and reach


def cone_params(alpha: np.ndarray, w: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """rho and lam of each posting (alpha < 1): lam = +inf at alpha = 0."""
    one_minus = 1.0 - alpha
    kappa = (theta - alpha) / one_minus
    rho = kappa / w
    with np.errstate(divide="ignore"):
        lam = np.where(alpha > 0.0, w * one_minus / np.where(alpha > 0.0, alpha, 1.0), np.inf)
    return rho, lam


def node_may_hold(minx: float, miny: float, maxx: float, maxy: float, rho_min: float, lam_max: float,
                  x: float, y: float, wm: float, max_dist: float) -> bool:
    """False only if no posting with rho >= rho_min, lam <= lam_max inside the box can qualify."""
    s = wm - rho_min + NODE_SLACK * (1.0 + abs(rho_min))   # rho's rounding, widened
    if s < 0.0:
        return False
    if lam_max == math.inf:
        return True
    dx = max(0.0, minx - x, x - maxx)
    dy = max(0.0, miny - y, y - maxy)
    return math.hypot(dx, dy) <= max_dist * lam_max * s * (1.0 + NODE_SLACK) + NODE_SLACK * max_dist


@dataclass
class ConeTree:
    """A k-d tree over one term's postings (indices into the posting arrays), nodes in lists."""
    box: list = field(default_factory=list)          # (minx, miny, maxx, maxy, rho_min, lam_max)
    kids: list = field(default_factory=list)         # (left, right) or None for a leaf
    members: list = field(default_factory=list)      # a leaf's posting indices


def build_tree(idx: np.ndarray, x: np.ndarray, y: np.ndarray, rho: np.ndarray, lam: np.ndarray,
               leaf: int, rho_scale: float) -> ConeTree:
    tree = ConeTree()
    key_rho = np.clip(rho, *RHO_SPLIT_CLIP) * rho_scale

    def node(sel: np.ndarray) -> int:
        i = len(tree.box)
        xs, ys, rs = x[sel], y[sel], key_rho[sel]
        tree.box.append((float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()),
                         float(rho[sel].min()), float(lam[sel].max())))
        tree.kids.append(None)
        tree.members.append(None)
        if len(sel) <= leaf:
            tree.members[i] = sel
            return i
        spreads = (xs.max() - xs.min(), ys.max() - ys.min(), rs.max() - rs.min())
        v = (xs, ys, rs)[int(np.argmax(spreads))]
        order = np.argsort(v, kind="stable")
        half = min(max(((len(sel) // 2 + leaf - 1) // leaf) * leaf, leaf), len(sel) - 1)
        left = node(sel[order[:half]])
        right = node(sel[order[half:]])
        tree.kids[i] = (left, right)
        return i

    node(idx)
    return tree


def search_tree(tree: ConeTree, x: float, y: float, wm: float, max_dist: float) -> tuple[int, list]:
    """Nodes tested and the leaves' posting index arrays read."""
    tested, read, stack = 0, [], [0]
    while stack:
        i = stack.pop()
        tested += 1
        if not node_may_hold(*tree.box[i], x, y, wm, max_dist):
            continue
        if tree.kids[i] is None:
            read.append(tree.members[i])
        else:
            stack.extend(tree.kids[i])
    return tested, read


class ConeModel:
    """The postings of a set of subscriptions at fixed thresholds, with the variants' structures."""

    def __init__(self, indptr, term_ids, weights, sx, sy, alpha, theta, max_dist: float,
                 leaf: int = 8, rho_scale: float = 100.0, block: int = 16, bands: int = 8):
        indptr = np.asarray(indptr, np.int64)
        counts = np.diff(indptr)
        sub = np.repeat(np.arange(len(counts)), counts)
        term = np.asarray(term_ids, np.int64)
        order = np.lexsort((sub, term))
        self.sub, self.term = sub[order], term[order]
        # the posting's term is its subscription's last (largest) term: no later term, rest = 0
        self.last = (np.arange(len(sub)) == indptr[sub + 1] - 1)[order]
        self.w = np.asarray(weights, np.float64)[order]
        self.sx, self.sy = np.asarray(sx, np.float64), np.asarray(sy, np.float64)
        self.alpha, self.theta = np.asarray(alpha, np.float64), np.asarray(theta, np.float64)
        self.x, self.y = self.sx[self.sub], self.sy[self.sub]
        a, th = self.alpha[self.sub], self.theta[self.sub]
        self.flat = a >= 1.0
        rho, lam = cone_params(np.where(self.flat, 0.5, a), self.w, th)
        self.rho, self.lam = np.where(self.flat, -np.inf, rho), np.where(self.flat, 0.0, lam)
        self.max_dist, self.leaf, self.rho_scale, self.block = max_dist, leaf, rho_scale, block
        self.band = np.minimum((a * bands).astype(np.int64), bands - 1)
        self.nbands = bands
        self.terms, self.starts = np.unique(self.term, return_index=True)
        self.ends = np.append(self.starts[1:], len(self.term))
        self.trees: dict[int, tuple[ConeTree | None, np.ndarray]] = {}
        self.low: dict[int, list[np.ndarray]] = {}
        # the pair index: keys t * 2^32 + u (t < u), sorted, with the subscriptions holding both
        keys, subs = [], []
        for n in range(2, int(counts.max(initial=0)) + 1):
            rows = np.flatnonzero(counts == n)
            if not len(rows):
                continue
            ids = np.asarray(term_ids, np.int64)[indptr[rows][:, None] + np.arange(n)]
            ids.sort(axis=1)
            for i in range(n):
                for j in range(i + 1, n):
                    keys.append(ids[:, i] * (1 << 32) + ids[:, j])
                    subs.append(rows)
        k = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        s = np.concatenate(subs) if subs else np.zeros(0, np.int64)
        o = np.argsort(k, kind="stable")
        self.pair_keys, self.pair_subs = k[o], s[o]
        self.pair_entries = len(k)

    def _range(self, t: int) -> tuple[int, int]:
        i = int(np.searchsorted(self.terms, t))
        if i >= len(self.terms) or self.terms[i] != t:
            return 0, 0
        return int(self.starts[i]), int(self.ends[i])

    def _tree(self, t: int) -> tuple[ConeTree | None, np.ndarray]:
        if t not in self.trees:
            a, b = self._range(t)
            idx = np.arange(a, b)
            cone = idx[~self.flat[idx]]
            tree = build_tree(cone, self.x, self.y, self.rho, self.lam, self.leaf, self.rho_scale) if len(cone) else None
            self.trees[t] = (tree, idx[self.flat[idx]])
        return self.trees[t]

    def _low_bands(self, t: int) -> list[np.ndarray]:
        """Per low band (alpha < 1/2): the band's posting indices in ascending rho."""
        if t not in self.low:
            a, b = self._range(t)
            idx = np.arange(a, b)
            out = []
            for g in range(self.nbands // 2):
                sel = idx[self.band[idx] == g]
                out.append(sel[np.argsort(self.rho[sel], kind="stable")])
            self.low[t] = out
        return self.low[t]

    def pair_hits(self, mterms: np.ndarray) -> tuple[int, np.ndarray]:
        """Entries read from the pair index for the message's terms, and the subscriptions found."""
        mt = np.sort(np.asarray(mterms, np.int64))
        i, j = np.triu_indices(len(mt), 1)
        keys = mt[i] * (1 << 32) + mt[j]
        lo = np.searchsorted(self.pair_keys, keys, "left")
        hi = np.searchsorted(self.pair_keys, keys, "right")
        found = [self.pair_subs[a:b] for a, b in zip(lo, hi) if b > a]
        subs = np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)
        return int((hi - lo).sum()), subs

    def brute(self, mterms, mw, x: float, y: float):
        """Every posting of the message's terms, the score of each subscription met, and how many
        terms it shares: (posting indices, sids, shared counts, scores)."""
        parts, wms = [], []
        for t, wm in zip(mterms, mw):
            a, b = self._range(int(t))
            parts.append(np.arange(a, b))
            wms.append(np.full(b - a, wm))
        p = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        wmp = np.concatenate(wms) if wms else np.zeros(0)
        sids, inv = np.unique(self.sub[p], return_inverse=True)
        tsim = np.zeros(len(sids))
        np.add.at(tsim, inv, self.w[p] * wmp)        # the engine adds in term order; ties checked below
        shared = np.bincount(inv, minlength=len(sids))
        dx, dy = x - self.sx[sids], y - self.sy[sids]
        d = np.sqrt(dx * dx + dy * dy)               # as scoring.pxd spatial_sim, bit for bit
        a = self.alpha[sids]
        score = a * (1.0 - d / self.max_dist) + (1.0 - a) * tsim
        return p, sids, shared, score

    def message(self, mterms, mw, x: float, y: float, today_high: int | None = None) -> dict:
        """The counts of every variant for one message, with the exactness checks."""
        p, sids, shared, score = self.brute(mterms, mw, x, y)
        qualify = score >= self.theta[sids]
        truth = set(sids[qualify].tolist())
        single_ok = dict(zip(sids.tolist(), (qualify & (shared == 1)).tolist()))
        pair_read, pair_subs = self.pair_hits(mterms)
        multi = set(sids[qualify & (shared >= 2)].tolist())
        assert multi <= set(pair_subs.tolist()), "the pair index missed a subscription sharing two terms"
        out = {"all": len(p), "pair_read": pair_read, "pair_hits": len(pair_subs), "qualify": len(truth)}
        # C: per-term trees
        nodes, read, found = 0, 0, set(multi)
        for t, wm in zip(mterms, mw):
            tree, flat = self._tree(int(t))
            leaves = []
            if tree is not None:
                n, leaves = search_tree(tree, x, y, float(wm), self.max_dist)
                nodes += n
            for arr in leaves + [flat]:
                read += len(arr)
                found.update(s for s in self.sub[arr].tolist() if single_ok[s])
        assert found == truth, f"C lost {sorted(truth - found)[:5]}"
        out.update(C_nodes=nodes, C_postings=read)
        # A: rho-sorted low bands with an early stop (blocks), high bands as today (engine count)
        read, heads, found = 0, 0, set(multi)
        for t, wm in zip(mterms, mw):
            for sel in self._low_bands(int(t)):
                if not len(sel):
                    continue
                n_le = int(np.searchsorted(self.rho[sel] - NODE_SLACK * (1.0 + np.abs(self.rho[sel])), wm, "right"))
                blocks = -(-n_le // self.block)
                heads += min(blocks + 1, -(-len(sel) // self.block))
                got = sel[:min(len(sel), blocks * self.block)]
                read += len(got)
                found.update(s for s in self.sub[got].tolist() if single_ok[s])
        high = {s for s in truth if min(int(self.alpha[s] * self.nbands), self.nbands - 1) >= self.nbands // 2}
        assert found | high == truth, f"A lost {sorted(truth - found - high)[:5]}"
        out.update(A_low_postings=read, A_low_heads=heads)
        # A0: no pair index.  Low bands: the postings with rest = 0 rho-sorted with the early stop
        # (at a first meeting such a subscription shares only t), those with rest > 0 all read.
        # Every qualifying low-band subscription must have its first-meeting posting read.
        read, got_all = 0, []
        for t, wm in zip(mterms, mw):
            for sel in self._low_bands(int(t)):
                if not len(sel):
                    continue
                last, rest = sel[self.last[sel]], sel[~self.last[sel]]
                n_le = int(np.searchsorted(self.rho[last] - NODE_SLACK * (1.0 + np.abs(self.rho[last])), wm, "right"))
                got = last[:min(len(last), -(-n_le // self.block) * self.block)]
                read += len(got) + len(rest)
                got_all += [got, rest]
        read_set = set(np.concatenate(got_all).tolist()) if got_all else set()
        first = {}                      # subscription -> its first-meeting posting (smallest term)
        for q in p.tolist():            # p is in ascending message term order
            first.setdefault(int(self.sub[q]), q)
        lost = [s for s in truth if s not in high and first[s] not in read_set]
        assert not lost, f"A0 lost {sorted(lost)[:5]}"
        out.update(A0_low_postings=read)
        return out


def main(argv=None) -> int:
    from skype.engine import Engine
    from skype.experiments.harness import RunSpec, prepare

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="tweets", choices=["tweets", "geonames"])
    p.add_argument("--num-subs", type=int, default=50_000)
    p.add_argument("--window", type=int, default=None, help="count window (default: --num-subs)")
    p.add_argument("--measured", type=int, default=1_000)
    p.add_argument("--turnover", type=int, default=None, help="messages after registration (default: --window)")
    p.add_argument("--leaf", type=int, default=8)
    p.add_argument("--rho-scale", type=float, default=100.0)
    p.add_argument("--block", type=int, default=16, help="block size of variant A's rho-sorted bands")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timed", action="store_true",
                   help="also time the Cython cone scan (skype._core.coneindex) against the block index's "
                        "dissemination, paired chunk by chunk, and check both find the model's set")
    p.add_argument("--chunk", type=int, default=250, help="messages per timed chunk (--timed)")
    p.add_argument("--timed-only", action="store_true", help="--timed without the prototypes' counts")
    p.add_argument("--json", help="write the per-message means to this file")
    args = p.parse_args(argv)
    window = args.window or args.num_subs
    turnover = window if args.turnover is None else args.turnover
    spec = RunSpec(dataset=args.dataset, num_subs=args.num_subs, window=window,
                   measured=turnover + args.measured, index="blocks", seed=args.seed)
    t0 = time.perf_counter()
    prep = prepare(spec)
    msgs, subs = prep.workload.messages, prep.workload.subscriptions
    first = prep.turn_over(turnover)
    assert isinstance(prep.engine, Engine)
    engine = prep.engine
    index = engine.subscription_index
    theta = engine.thresholds(subs.ids)
    t1 = time.perf_counter()
    m = msgs.slice(first, first + args.measured)
    indptr = np.ascontiguousarray(m.terms.indptr, np.int64)
    terms = np.ascontiguousarray(m.terms.ids, np.uint32)
    weights = np.ascontiguousarray(m.terms.weights, np.float64)
    before, bands0 = index.counters(), list(index.band_postings())
    index.scan_only(indptr, terms, weights, m.x, m.y, False)
    after, bands1 = index.counters(), list(index.band_postings())
    today = (after["entries_visited"] - before["entries_visited"]) / args.measured
    band = [(b - a) / args.measured for a, b in zip(bands0 + [0] * (len(bands1) - len(bands0)), bands1)]
    model = ConeModel(subs.terms.indptr, subs.terms.ids, subs.terms.weights, subs.x, subs.y, subs.alpha,
                      theta, prep.workload.bounds.max_dist,
                      leaf=args.leaf, rho_scale=args.rho_scale, block=args.block)
    t2 = time.perf_counter()
    tot: dict[str, float] = {}
    args.timed = args.timed or args.timed_only
    for i in range(0 if args.timed_only else args.measured):
        a, b = indptr[i], indptr[i + 1]
        r = model.message(terms[a:b], weights[a:b], float(m.x[i]), float(m.y[i]))
        for k, v in r.items():
            tot[k] = tot.get(k, 0) + v
    per = {k: v / args.measured for k, v in tot.items()}
    high = sum(band[len(band) // 2:]) if len(band) == model.nbands else None
    row = {"today_postings": today, "today_band_postings": band, **per,
           "A_postings": None if high is None or not per else per["A_low_postings"] + high + per["pair_read"],
           "A0_postings": None if high is None or not per else per["A0_low_postings"] + high,
           "C_items": per["C_postings"] + per["C_nodes"] + per["pair_read"] if per else None,
           "pair_index_entries": model.pair_entries, "prepare_s": t1 - t0, "model_s": time.perf_counter() - t2}
    if args.timed:
        row.update(timed(engine, index, model, args, indptr, terms, weights, m))
    print(json.dumps(row, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "row": row}, f, indent=2)
    return 0


def timed(engine, index, model: ConeModel, args, indptr, terms, weights, m) -> dict:
    """The Cython cone trees against the block index's disseminate(), on the same state: paired
    chunks in alternating order; both must report the brute force's qualifying set."""
    from skype._core.coneindex import ConeIndex

    t0 = time.perf_counter()
    cone = ConeIndex(engine.subscription_table, model.max_dist, leaf=args.leaf, rho_scale=args.rho_scale)
    cone.build_from_table()
    build_s = time.perf_counter() - t0
    seconds = {"blocks": 0.0, "cone": 0.0}
    before = index.counters()["entries_visited"]
    for c, a in enumerate(range(0, args.measured, args.chunk)):
        b = min(a + args.chunk, args.measured)
        part = (np.ascontiguousarray(indptr[a:b + 1] - indptr[a]), terms[indptr[a]:indptr[b]],
                weights[indptr[a]:indptr[b]], np.ascontiguousarray(m.x[a:b]), np.ascontiguousarray(m.y[a:b]))
        found = {}
        for name in (("blocks", "cone") if c % 2 == 0 else ("cone", "blocks")):
            s, rows = (index if name == "blocks" else cone).disseminate_only(*part)
            seconds[name] += s
            found[name] = rows
        assert found["blocks"] == found["cone"], f"chunk {c}: the cone scan and the block index disagree"
        for i in range(b - a):
            mt, mw = terms[indptr[a + i]:indptr[a + i + 1]], weights[indptr[a + i]:indptr[a + i + 1]]
            _, sids, _, score = model.brute(mt, mw, float(m.x[a + i]), float(m.y[a + i]))
            want = sorted(sids[score >= model.theta[sids]].tolist())
            got = sorted(r & 0xFFFFFFFF for r in found["cone"] if r >> 32 == i)
            assert got == want, f"message {a + i}: the cone scan found {len(got)}, brute force {len(want)}"
    n = args.measured
    return {"timed_blocks_disseminate_us": seconds["blocks"] / n * 1e6, "timed_cone_us": seconds["cone"] / n * 1e6,
            "timed_blocks_postings": (index.counters()["entries_visited"] - before) / n,
            "timed_cone_postings": (cone.cone_counts[0] + cone.cone_counts[1] + cone.cone_counts[2]) / n,
            "timed_cone_nodes": cone.cone_counts[4] / n, "timed_cone_pair_entries": cone.cone_counts[3] / n, "cone_build_s": build_s,
            "cone_memory_bytes": cone.memory_bytes()}


if __name__ == "__main__":
    raise SystemExit(main())
