# cython: language_level=3
"""The core engine's instruments, read from a ``CoreEngine`` without changing it: its counters
(always kept), its per-phase clocks (when ``set_timers(True)``), and its bytes by component.

``engine_stats(core)`` is what ``Engine.stats()`` starts from.  The counters of a phase add up
across the indexes (``scan_postings`` counts every entry an index reads, whatever its layout);
the clocks are ``None`` when the timers are off, so a figure is never a stale zero.
"""
from skype._core.engine cimport CoreEngine


def _phases(CoreEngine core, dict b):
    """The instruments: per-phase counters, and per-phase seconds when the timers are on
    (``None`` otherwise).  scan and verify split the dissemination where the index times them."""
    c = core.index.counters()
    idx = core.index.phase_seconds() if hasattr(core.index, "phase_seconds") else {}
    timed = bool(core.timed)
    return {
        "timers": timed,
        "counts": {
            "enter": core.arrivals, "scan_postings": c["entries_visited"],
            "scan_nodes": c.get("nodes_tested", c["blocks_visited"] + c["blocks_skipped"]),
            "verify": c["candidates"],
            "admit": b["admits"], "admits_in_topk": b["admits_in_topk"],
            "expire": core.expirations, "holder_entries": core.holder_entries,
            "holders_visited": core.holders_visited, "holders_found": core.holders_found,
            "holders_dropped": b["holders_dropped"],
            "reevaluate": b["reevaluations"] + b["threshold_refreshes"],
            "flush_events": core.flushed_events, "flush_changes": core.flushed_changes,
        },
        "band_postings": core.index.band_postings() if hasattr(core.index, "band_postings") else None,
        "seconds": {
            "enter": core.enter_ns / 1e9, "disseminate": core.disseminate_ns / 1e9,
            "scan": idx.get("scan"), "verify": idx.get("verify"),
            "admit": core.admit_ns / 1e9, "expire": core.expiry_ns / 1e9,
            "reevaluate": b["reevaluate_seconds"], "flush": core.flush_ns / 1e9,
        } if timed else None,
    }


def engine_stats(CoreEngine core):
    """The engine's counters, clocks and bytes (``Engine.stats()`` builds on it)."""
    b = core.buffers.stats()
    return {
        "subscriptions": core.table.live,
        "window_size": core.window.count,
        "arrivals": core.arrivals,
        "expirations": core.expirations,
        "reverse_map": bool(core.reverse_map),
        "expiry_candidates": core.expiry_candidates,
        "micro_batch": core.micro_batch,
        "batch_rescored": core.batch_rescored,
        "amp_us": core.arrival_ns / core.arrivals / 1e3 if core.arrivals else 0.0,
        "emp_us": core.expiry_ns / core.expirations / 1e3 if core.expirations else 0.0,
        **b,
        "bulk_registration": {"subscriptions": core.bulk_subscriptions, "passes": core.bulk_passes,
                              "run_factor": core.buffers.bulk_factor,
                              "seconds": core.bulk_ns / 1e9, "build_seconds": core.bulk_build_ns / 1e9,
                              "offers": core.bulk_offers, "dissemination": dict(core.bulk_counters),
                              "mode": "search" if core.reg_search else "replay",
                              "search": dict(core.search_stats)},
        "dissemination": core.index.counters(),
        "phases": _phases(core, b),
        "message_index": core.msgs.stats(),
        "buffer_arena": core.buffers.arena.stats(),
        "memory_bytes": {
            "subscription_table": core.table.memory_bytes(),
            "subscription_index": core.index.memory_bytes(),
            "buffers": core.buffers.memory_bytes(),
            "window": core.window.memory_bytes(),
            "message_index": core.msgs.memory_bytes(),
        },
    }
