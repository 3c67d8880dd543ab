"""A snapshot's engine state (``engine.npz``, issue 34): a restore imports the top-k
subscriptions with their buffers, and falls back to registering them when the section is missing
(an older snapshot), damaged, unreadable or does not fit, saying so; never a silent loss.

Each case restores a snapshot of a live state (top-k subscriptions in bulk and one by one, a
range subscription, an unsubscribe, message batches) and checks that the restored state equals
the live one (results, records, owners, vocabulary, window, position, seq), that the log's
later commands give both the same events, and that both equal the reference engine's state.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from skype.engine import Engine
from skype.model import Bounds
from skype.reference import ReferenceEngine
from skype.service import snapshot
from skype.service.auth import owner_hash
from skype.service.state import State

BOUNDS = Bounds(-4.0, -4.0, 4.0, 4.0)
WORDS = ["pizza", "pasta", "sushi", "ramen", "tacos", "curry"]
OWNER = owner_hash("owner-token")


def _core(vocabulary):
    return Engine(bounds=BOUNDS, vocabulary=vocabulary, window=40)


def _reference(vocabulary):
    return ReferenceEngine(bounds=BOUNDS, vocabulary=vocabulary, window=40)


def _messages(rng: random.Random, first: int, n: int) -> dict:
    lines = [json.dumps({"id": first + i, "x": rng.uniform(-4, 4), "y": rng.uniform(-4, 4),
                         "text": " ".join(rng.sample(WORDS, rng.randint(1, 3)))}) for i in range(n)]
    return {"op": "msgs", "ndjson": "\n".join(lines) + "\n"}


def _commands(seed: int) -> tuple[list[dict], list[dict]]:
    """(commands before the snapshot, commands after it)."""
    rng = random.Random(seed)
    subs = [json.dumps({"id": i, "x": rng.uniform(-4, 4), "y": rng.uniform(-4, 4), "k": rng.randint(1, 5),
                        "alpha": rng.choice([0.0, 0.3, 0.5, 1.0]), "text": " ".join(rng.sample(WORDS, 2))})
            for i in range(60)]
    before = [_messages(rng, 1000, 50),
              {"op": "subs", "ndjson": "\n".join(subs) + "\n", "token_hashes": [OWNER] * len(subs)},
              _messages(rng, 2000, 30),
              {"op": "sub", "rec": {"id": 100, "x": 0.5, "y": 0.5, "k": 3, "alpha": 0.5, "text": "pizza"},
               "token_hash": OWNER},
              {"op": "sub", "rec": {"id": 101, "kind": "range", "rect": [-1, -1, 2, 2], "text": "sushi"},
               "token_hash": OWNER},
              {"op": "unsub", "id": 7},
              _messages(rng, 3000, 25)]
    after = [_messages(rng, 4000, 30), {"op": "unsub", "id": 9}, _messages(rng, 5000, 30)]
    return before, after


def _view(state: State) -> tuple:
    return (state.results_ndjson(), dict(state.records), dict(state.tokens), sorted(state.other_kinds),
            state.vocabulary.to_dict(), state.window_records(), state.position, state.seq)


def _events(state: State, commands: list[dict]) -> list[dict]:
    return [ev for cmd in commands for block in state.apply(dict(cmd))[1] for ev in block.events()]


def _snapshot(state: State, directory, with_engine: bool = True):
    subs = [(sid, rec.decode(), state.tokens.get(sid, "")) for sid, rec in sorted(state.records.items())]
    meta = state.meta()
    meta["vocabulary"] = {k: list(v) if isinstance(v, list) else v for k, v in meta["vocabulary"].items()}
    return snapshot.write(directory, 1, meta, subs, (*state.window.columns(), state.window.batch()),
                          state.engine_state() if with_engine else None)


def _live(seed: int) -> tuple[State, State, list[dict]]:
    before, after = _commands(seed)
    live, oracle = State(_core), State(_reference)
    for cmd in before:
        live.apply(dict(cmd))
        oracle.apply(dict(cmd))
    assert _view(live) == _view(oracle)
    return live, oracle, after


def _check_restore(path, live: State, oracle: State, after: list[dict], imported: bool) -> None:
    meta, subs, window, engine_state = snapshot.read(path)
    again = State(_core)
    again.restore(meta, subs, window, engine_state)
    assert (again.restored_by == "engine state") == imported  # else registered: by columns or records
    assert _view(again) == _view(live)
    assert _events(again, after) == _events(live, after) == _events(oracle, after)
    assert _view(again) == _view(live) == _view(oracle)


@pytest.mark.parametrize("seed", range(3))
def test_restore_imports_the_engine_state(seed, tmp_path):
    live, oracle, after = _live(seed)
    path = _snapshot(live, tmp_path / "snapshots")
    assert json.loads((path / "meta.json").read_text())["engine_state"] == 1
    _check_restore(path, live, oracle, after, True)


def test_an_older_snapshot_registers_again(tmp_path, capsys):
    live, oracle, after = _live(5)
    path = _snapshot(live, tmp_path / "snapshots", with_engine=False)
    assert not (path / snapshot.ENGINE_FILE).exists()
    _check_restore(path, live, oracle, after, False)
    assert capsys.readouterr().err == ""  # nothing to say: it never had one


@pytest.mark.parametrize("where", ["header", "middle", "end"])
def test_a_damaged_engine_state_is_dropped_said_and_registered_again(where, tmp_path, capsys):
    live, oracle, after = _live(6)
    path = _snapshot(live, tmp_path / "snapshots")
    raw = bytearray((path / snapshot.ENGINE_FILE).read_bytes())
    raw[{"header": 3, "middle": len(raw) // 2, "end": len(raw) - 1}[where]] ^= 0x40
    (path / snapshot.ENGINE_FILE).write_bytes(bytes(raw))
    assert snapshot.newest_good(tmp_path / "snapshots")[0] == path  # the rest of the snapshot is good
    _check_restore(path, live, oracle, after, False)
    err = capsys.readouterr().err
    assert "engine.npz is dropped: it fails its checksum" in err and "registered again" in err


def test_a_missing_or_unreadable_engine_state_is_dropped_and_said(tmp_path, capsys):
    live, oracle, after = _live(7)
    path = _snapshot(live, tmp_path / "snapshots")
    (path / snapshot.ENGINE_FILE).unlink()
    _check_restore(path, live, oracle, after, False)
    assert "does not read back" in capsys.readouterr().err
    # a file that matches its checksum but is no npz (a bug, not damage): the same fallback
    live, oracle, after = _live(8)
    path = _snapshot(live, tmp_path / "again")
    (path / snapshot.ENGINE_FILE).write_bytes(b"not an npz")
    meta = json.loads((path / "meta.json").read_text())
    meta["crc"][snapshot.ENGINE_FILE] = snapshot._crc(path / snapshot.ENGINE_FILE)
    (path / "meta.json").write_text(json.dumps(meta))
    _check_restore(path, live, oracle, after, False)
    assert "does not read back" in capsys.readouterr().err


def test_an_engine_state_that_does_not_fit_is_not_used(tmp_path, capsys):
    """A state naming subscriptions the records do not hold, or refused by the engine (E160: here
    another window), is not imported: every subscription is registered again."""
    live, oracle, after = _live(9)
    path = _snapshot(live, tmp_path / "snapshots")
    meta, subs, window, engine_state = snapshot.read(path)
    stranger = dict(engine_state, ids=engine_state["ids"] + 10_000)
    again = State(_core)
    again.restore(meta, subs, window, stranger)
    assert again.restored_by != "engine state" and _view(again) == _view(live)
    assert "names subscriptions the snapshot's records do not hold" in capsys.readouterr().err
    shifted = dict(engine_state, window_ids=np.roll(engine_state["window_ids"], 1))
    again = State(_core)
    again.restore(meta, subs, window, shifted)
    assert again.restored_by != "engine state" and _view(again) == _view(live)
    assert "E160" in capsys.readouterr().err
    assert _events(again, after) == _events(live, after) == _events(oracle, after)


def test_a_reference_engine_writes_no_engine_state(tmp_path):
    _, oracle, after = _live(10)
    path = _snapshot(oracle, tmp_path / "snapshots")
    assert not (path / snapshot.ENGINE_FILE).exists()
    assert snapshot.read(path)[3] is None
