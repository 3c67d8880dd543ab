"""Small output helpers shared by the library and the CLI: tables, progress bars, resource figures, machine facts.

No engine state: each helper formats or measures one thing (the run drivers, :mod:`skype.simulate`
and :mod:`skype.experiments`, report with them; the CLI prints with them)."""

from __future__ import annotations

import os
import platform
import resource
import sys
from typing import Iterable, TextIO


def print_table(title: str, rows: Iterable[tuple[str, object]], file: TextIO | None = None) -> None:
    """Print ``rows`` as an aligned key/value table; ``file`` defaults to the *current* ``sys.stdout``."""
    file = sys.stdout if file is None else file
    rows = [(str(k), str(v)) for k, v in rows]
    width = max((len(k) for k, _ in rows), default=0)
    print(f"== {title} ==", file=file)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}", file=file)
    file.flush()


def progress_bar(total: int, desc: str, enabled: bool | None = None):
    """A tqdm bar on stderr; ``enabled=None`` shows it only when stderr is a terminal."""
    from tqdm import tqdm

    disable = (not sys.stderr.isatty()) if enabled is None else (not enabled)
    return tqdm(total=total, desc=desc, unit="msg", unit_scale=True, file=sys.stderr, disable=disable,
                dynamic_ncols=True)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def rss_bytes() -> int:
    """Resident set size of this process now (Linux ``/proc/self/statm``; elsewhere the peak)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss_bytes()


def release_free_memory() -> bool:
    """Give the C heap's free pages back to the OS (glibc's ``malloc_trim(0)``); False where the
    C library has no such call.  Chunks freed below the mmap threshold stay resident until then:
    the workload generator's temporaries alone left ~0.4 GB of them at 1M subscriptions (the
    threshold rises to 32 MB after the first large free, so most numpy temporaries live there)."""
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    return bool(trim(0))


def machine_info() -> dict[str, object]:
    """CPU model, cores, memory and versions, for reports."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal"):
                    mem = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    import numpy

    from skype import __version__

    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_bytes": mem, "platform": platform.platform(),
        "python": platform.python_version(), "numpy": numpy.__version__, "skype": __version__,
    }


def simulate_rows(metrics: dict) -> list[tuple[str, object]]:
    """The table of a ``simulate`` run's metrics (:func:`skype.simulate.run`)."""
    return [
        ("input", metrics["input"]), ("engine", metrics["engine"]),
        ("window", metrics.get("window") or f"{metrics.get('window_seconds')} s"),
        ("subscriptions", metrics["subscriptions"]), ("messages", metrics["messages"]),
        ("window fill (msgs, s)", f"{metrics['fill_messages']:,}, {metrics['fill_s']:.1f}"),
        ("turnover (msgs, s)", f"{metrics['turnover_messages']:,}, {metrics['turnover_s']:.1f}"),
        ("registration (s)", f"{metrics['subscribe_s']:.2f}"),
        ("AMP (us/arriving msg)", f"{metrics['amp_us']:.2f}"), ("EMP (us/expiring msg)", f"{metrics['emp_us']:.2f}"),
        ("flush, other (us/msg)", f"{metrics.get('flush_us', 0.0):.2f}, {metrics.get('other_us', 0.0):.2f}"),
        ("throughput (msgs/s)", f"{metrics['throughput_msgs_per_s']:,.0f}"),
        ("re-evaluations", metrics["reevaluations"]), ("avg buffer size", f"{metrics['avg_buffer_size']:.2f}"),
        ("result changes", metrics["result_changes"]), ("rejected records", metrics["rejected_records"]),
        ("peak RSS (MB)", f"{metrics['peak_rss_bytes'] / 2**20:,.0f}"),
        *[(f"RSS / peak after {m['stage']} (MB)", f"{m['rss_bytes'] / 2**20:,.0f} / {m['peak_rss_bytes'] / 2**20:,.0f}"
           f" (engine {m['engine_bytes'] / 2**20:,.0f})") for m in metrics.get("memory_stages") or []],
    ]


def distributed_rows(metrics: dict, settings, run_dir) -> list[tuple[str, object]]:
    """The table of one method's distributed run (``settings``: its ``RunSettings``)."""
    resumed = metrics["resumed"]
    rows = [
        ("input", metrics["input"]), ("method", f"{metrics['method']}, P = {settings.distribution.partitions}"),
        ("window", metrics["window"]), ("master", metrics["master"]), ("run directory", run_dir),
        ("batches", f"{metrics['batches']} of {settings.control.batch_size} messages" + (" (resumed)" if resumed else "")),
        ("messages", metrics["messages"]),
        ("throughput (msgs/s)", f"{metrics['throughput_msgs_per_s']:,.0f} in batches, "
                                f"{metrics['wall_throughput_msgs_per_s']:,.0f} wall"),
        ("batch latency p50 / p99 (ms)", f"{metrics['batch_latency_ms_p50']:,.0f} / {metrics['batch_latency_ms_p99']:,.0f}"),
        ("communication per message", f"{metrics['communication_per_message']:.2f}"
                                      + (f" (+ {metrics['backfill_per_message']:.2f} read back, "
                                         f"{metrics['backfill_rebuilds']} rebuilds)"
                                         if metrics.get("backfill_per_message") else "")),
        ("replication ratio", f"{metrics['replication_ratio']:.2f}"),
        ("load imbalance (max/mean)", f"{metrics['load_imbalance']:.2f}"),
        ("cache hit rate (steady)", f"{metrics['cache_hit_rate']:.1%} ({metrics['cache_hit_rate_steady']:.1%})"),
        ("state bytes written / batch", f"{metrics['state_bytes_written_per_batch']:,.0f}"),
        ("result events", metrics["result_events"]),
        ("routing closure / tables (bytes)", f"{metrics['routing_bytes']:,} / {metrics['routing_table_bytes']:,}"),
        ("driver peak RSS (MB)", f"{metrics['driver_peak_rss_bytes'] / 2**20:,.0f}"),
        ("dead letters", metrics["dead_letters"]),
    ]
    if "moves" in metrics:
        rows.append(("rebalancing", f"{metrics['rebalance_policy']}: {metrics['moves']} moves, "
                                    f"{metrics['subscriptions_moved']} subscriptions, "
                                    f"{metrics['state_bytes_moved']:,} state bytes"))
    if metrics.get("stopped_early"):
        rows.append(("stopped", "early: run again with the same --checkpoint to resume"))
    return rows
