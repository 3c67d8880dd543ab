"""Atomic file commits shared by the runtime's durable side files (tables, hand-overs, summaries).

Several attempts of one Spark task may run at once (a retry, a speculative copy, a zombie).  Each
writes under a temporary name unique to the attempt and then commits it under its final name:

* :func:`write_once` links the temporary file to its name (``os.link`` fails on an existing name):
  the first committed file is the one every reader sees, the others are dropped; for decisions that
  are deterministic, any attempt's file is the right one;
* :func:`write_replacing` renames it over the name (``os.replace``, atomic): a re-run's record of
  the same decision replaces the earlier one whole.

Neither ever leaves a torn file under a final name.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def _attempt_tmp(path: Path) -> Path:
    """A temporary name unique to this attempt (a speculative or zombie attempt has its own)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def write_once(path: Path, blob: bytes) -> bool:
    """Commit ``blob`` as ``path`` unless an attempt did first: written under a temporary name
    unique to this attempt, then linked to its final name (``os.link`` fails on an existing
    name, so two attempts never tear or replace each other's file).  Returns whether this call
    committed it."""
    if path.exists():
        return False
    tmp = _attempt_tmp(path)
    with open(tmp, "wb") as fh:
        fh.write(blob)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def write_replacing(path: Path, blob: bytes) -> None:
    """Commit ``blob`` as ``path``, replacing it atomically (a re-run's record of the same
    decision), from a temporary name unique to this attempt."""
    tmp = _attempt_tmp(path)
    with open(tmp, "wb") as fh:
        fh.write(blob)
    os.replace(tmp, path)
