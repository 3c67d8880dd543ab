# cython: language_level=3
"""Introspection of the cone trees' layout (conetree.pyx), for tests and ``stats()``: its sizes
(``structure``) and its invariants (``check_invariants``).  Read-only: nothing here changes the
layout, and nothing on the dissemination's path calls it.

The invariants checked: per subscription in the index and per term, exactly one live posting
(rho from theta_idx <= theta) or flat entry; per pair of its terms one live pair entry, whose text
weights are rounded up and whose location and alpha are the subscription's; no live entry of a
subscription out of the index; every wide node bounds the postings below it, which it covers
contiguously, and no node reaches into a term's tail.
"""
from libc.math cimport INFINITY
from libc.stdint cimport uint32_t
from skype._core.types cimport sid_t
from skype._core.subindex cimport SubHotC
from skype._core.conetree cimport (ConeLayout, ConeTermC, ConeWideC, ConePostC, PairEntC, MAX_PAIR_TERMS,
                                   NO_TERM, PAIR_EMPTY)


def structure(ConeLayout layout):
    """Sizes of the layout: terms, tree postings, tail postings, (wide) nodes, flat entries, pair
    entries (live and dead), rebuilds and re-posts so far."""
    cdef size_t k, tree = 0, tail = 0, nodes = 0, flat = 0, pents = 0
    for k in range(layout.terms.size()):
        tree += layout.terms[k].tree_n
        tail += layout.terms[k].posts.size() - layout.terms[k].tree_n
        nodes += layout.terms[k].wide.size()
        flat += layout.terms[k].flat.size()
    for k in range(layout.plists.size()):
        pents += layout.plists[k].size()
    return {"terms": layout.terms.size(), "tree_postings": tree, "tail_postings": tail, "nodes": nodes,
            "flat_entries": flat, "pair_entries": pents, "pair_live": layout.pair_live,
            "rebuilds": layout.rebuilds, "reposts": layout.reposts, "rebuilt_postings": layout.rebuilt_postings}


cdef uint32_t _check_wide(ConeTermC* ct, uint32_t wi, uint32_t lo, int* reached) except? 0xFFFFFFFF:
    """Wide node wi's children cover the postings from lo on, contiguously, each bounding its
    members; returns the end of the range covered."""
    cdef const ConeWideC* w = &ct.wide[wi]
    cdef uint32_t at = lo, end, i
    cdef int k
    reached[0] += 1
    for k in range(2):
        if w.cnt[k] == 0 and w.rho_min[k] == INFINITY:
            assert k == 1 and wi == 0, "wide node: an empty child below the root"
            continue
        if w.cnt[k]:
            assert w.ref[k] == at, "wide node: a leaf out of order"
            end = at + w.cnt[k]
        else:
            end = _check_wide(ct, w.ref[k], at, reached)
        assert end <= ct.tree_n, "wide node: reaches into the tail"
        for i in range(at, end):
            assert (w.minx[k] <= ct.keys[i >> 2].x[i & 3] <= w.maxx[k]
                    and w.miny[k] <= ct.keys[i >> 2].y[i & 3] <= w.maxy[k]
                    and w.rho_min[k] <= ct.keys[i >> 2].rho[i & 3]
                    and ct.keys[i >> 2].lam[i & 3] <= w.lam_max[k]), f"wide node {wi} does not bound posting {i}"
        at = end
    return at


def check_invariants(ConeLayout layout):
    """Per subscription in the index and per term, exactly one live posting (tree
    subscriptions, rho from theta_idx <= theta) or flat entry; per pair of its terms, one live
    pair entry; no live entry of a subscription out of the index; nodes bound their members."""
    cdef sid_t sid
    cdef size_t k, i, j
    cdef const ConePostC* p
    cdef ConeTermC* ct
    cdef const SubHotC* h
    cdef int reached
    cdef double kappa
    cdef const PairEntC* pe
    cdef double w
    slot_term = {s: t for t, s in dict(layout.term_slot).items()}
    live = {}
    pairs = {}
    for k in range(layout.terms.size()):
        ct = &layout.terms[k]
        for i in range(ct.posts.size()):
            p = &ct.posts[i]
            if layout.ver[p.sid] == p.ver:
                assert layout.present[p.sid], f"sid {p.sid}: live posting out of the index"
                live[(p.sid, k)] = live.get((p.sid, k), 0) + 1
                h = &layout.table.hot[p.sid]
                w = layout.table.terms[h.term_off + layout.table.term_pos(p.sid, slot_term[k])].w
                kappa = (layout.table.theta_idx[p.sid] - h.alpha) / (1.0 - h.alpha)
                assert ct.keys[i >> 2].rho[i & 3] <= kappa / w, \
                    f"sid {p.sid}: posting rho above its theta_idx's"
        for i in range(ct.flat.size()):
            if layout.gen[ct.flat[i].sid] == ct.flat[i].gen:
                assert layout.present[ct.flat[i].sid], f"sid {ct.flat[i].sid}: live flat entry out of the index"
                live[(ct.flat[i].sid, k)] = live.get((ct.flat[i].sid, k), 0) + 1
        assert ct.keys.size() == (ct.posts.size() + 3) // 4, f"term slot {k}: key lines"
        reached = 0
        if ct.tree_n:
            assert _check_wide(ct, 0, 0, &reached) == ct.tree_n, f"term slot {k}: the tree's postings"
        assert reached == <int>ct.wide.size(), f"term slot {k}: wide nodes not reached"
    for k in range(layout.pslots.size()):
        if layout.pslots[k].key == PAIR_EMPTY:
            continue
        t, u = layout.pslots[k].key >> 32, layout.pslots[k].key & 0xFFFFFFFF
        for i in range(layout.plists[layout.pslots[k].list].size()):
            pe = &layout.plists[layout.pslots[k].list][i]
            if layout.gen[pe.sid] != pe.gen:
                continue
            pairs[pe.sid] = pairs.get(pe.sid, 0) + 1
            h = &layout.table.hot[pe.sid]
            weights = {layout.table.terms[h.term_off + j].term: layout.table.terms[h.term_off + j].w
                       for j in range(h.nterms)}
            b = {t: pe.b_t, u: pe.b_u}
            if pe.third != NO_TERM:
                b[pe.third] = pe.b_third
            assert set(b) == set(weights), f"sid {pe.sid}: pair entry ({t}, {u}) names other terms"
            assert pe.x == <float>h.x and pe.y == <float>h.y and pe.alpha == <float>h.alpha, \
                f"sid {pe.sid}: pair entry's location or alpha"
            assert all(b[v] >= (1.0 - h.alpha) * weights[v] for v in b), \
                f"sid {pe.sid}: pair entry's text weights not rounded up"
    expected = 0
    for sid in range(layout.present.size()):
        if not layout.present[sid]:
            continue
        h = &layout.table.hot[sid]
        assert h.alive and layout.table.theta_idx[sid] <= h.theta, f"sid {sid}: theta_idx above theta"
        for i in range(h.nterms):
            t = layout.table.terms[h.term_off + i].term
            assert live.get((sid, layout.term_slot[t]), 0) == 1, f"sid {sid}: not one live posting of term {t}"
            expected += 1
        if h.alpha < 1.0 and h.nterms <= MAX_PAIR_TERMS:
            assert pairs.get(sid, 0) == h.nterms * (h.nterms - 1) // 2, f"sid {sid}: pair entries"
    assert sum(live.values()) == expected, "live postings of subscriptions out of the index"
    assert sum(pairs.values()) == layout.pair_live, "pair_live miscounted"
    return True
