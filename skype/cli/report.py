"""Small output helpers for the CLI: tables, progress bars, resource figures, machine facts."""

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
