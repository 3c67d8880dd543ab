"""The service's columnar path (design 2), in process: NDJSON batches decoded and validated by
columns give bit for bit the batch of the record-by-record path (design 1); a bad record
anywhere in a batch gives design 1's catalogue error naming its line and changes nothing (not
even the log); the window's records follow the engine's window; the columnar events fold into
the engine's results."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("msgspec")

from skype.engine import Engine  # noqa: E402
from skype.errors import InputError  # noqa: E402
from skype.service import ingest  # noqa: E402
from skype.service.state import State  # noqa: E402
from skype.text import Vocabulary  # noqa: E402
from skype.workload import messages_batch  # noqa: E402

WORDS = ["coffee", "Coffee", "CAFE\u0301", "café", "paris", "Ünïcode", "metro", "x", "straße", "STRASSE", "pizza",
         "the", "ß", "naïve"]


def state(mode: str, window: int = 50, seconds: float | None = None) -> State:
    kw = {"window": window} if seconds is None else {"window_seconds": seconds}
    return State(lambda v: Engine(vocabulary=v, **kw), Vocabulary(), ingest=mode)


def design1_batch(raw: bytes):
    s = state("records")
    recs, lines = ingest.parse_records(raw)
    rows, _ = s._check_records(recs, lines)
    return messages_batch(rows), s.vocabulary


def design2_batch(raw: bytes):
    vocab = Vocabulary()
    starts, _ = ingest.record_lines(raw)
    s = state("columnar")
    return ingest.columnar_batch(raw, len(starts), vocab, s.engine.bounds, 0, s.engine.clock), vocab


def assert_same_batch(a, b) -> None:
    for name in ("ids", "x", "y", "t"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for name in ("indptr", "ids", "weights"):
        x, y = getattr(a.terms, name), getattr(b.terms, name)
        assert x.shape == y.shape and np.array_equal(x, y), name  # bit for bit, not approximately


record = st.fixed_dictionaries(
    {"x": st.floats(-180, 180), "y": st.floats(-90, 90)},
    optional={"t": st.none()},
).flatmap(lambda base: st.one_of(
    st.dictionaries(st.sampled_from(WORDS), st.floats(0.01, 100) | st.integers(1, 5), min_size=1, max_size=20)
    .map(lambda terms: dict(base, terms=terms)),
    st.lists(st.sampled_from(WORDS + ["the", "and"]), min_size=1, max_size=25)
    .map(lambda words: dict(base, text=" ".join(words) + " zz")),
))


@settings(max_examples=60, deadline=None)
@given(st.lists(record, min_size=1, max_size=30), st.sampled_from([b"\n", b"\n\n  \n", b"\r\n"]))
def test_columnar_batch_is_design_1s_bit_for_bit(recs, sep):
    lines = [json.dumps(dict(r, id=i), ensure_ascii=bool(i % 2)).encode() for i, r in enumerate(recs)]
    raw = sep.join(lines) + sep
    a, va = design1_batch(raw)
    b, vb = design2_batch(raw)
    assert_same_batch(a, b)
    assert va._terms == vb._terms  # new terms got the same ids, in the same order


def test_long_rows_weigh_as_design_1():
    rng = np.random.default_rng(5)
    recs = [{"id": i, "x": 1.0, "y": 2.0, "t": 1.0,
             "terms": {f"w{j}": float(rng.random()) + 0.1 for j in range(n)}} for i, n in enumerate((15, 16, 40, 200))]
    raw = b"\n".join(json.dumps(r).encode() for r in recs)
    assert_same_batch(design1_batch(raw)[0], design2_batch(raw)[0])


GOOD = [{"id": i, "x": 1.0 + i, "y": 2.0, "t": float(i), "terms": {"coffee": 1.0, f"new{i}": 2.0}} for i in range(5)]
BAD = [  # (record at line 3, code)
    ({"id": 2, "x": 500.0, "y": 2.0, "t": 2.0, "text": "coffee"}, "E002"),
    ({"id": True, "x": 1.0, "y": 2.0, "t": 2.0, "text": "coffee"}, "E025"),
    ({"id": 2, "x": 1.0, "y": 2.0, "t": 0.5, "text": "coffee"}, "E009"),
    ({"id": 0, "x": 1.0, "y": 2.0, "t": 2.0, "text": "coffee"}, "E019"),
    ({"id": 2, "x": 1.0, "y": 2.0, "t": 2.0, "terms": {}}, "E027"),
    ({"id": 2, "x": 1.0, "y": 2.0, "t": 2.0, "terms": {"a": -1.0}}, "E006"),
    ({"id": 2, "x": 1.0, "y": 2.0, "t": 2.0}, "E013"),
    ({"id": 2, "x": 1.0, "y": 2.0, "t": 2.0, "text": "the and"}, "E005"),
    ({"id": 2, "x": "1", "y": 2.0, "t": 2.0, "text": "coffee"}, "E012"),
    ({"id": 2, "y": 2.0, "t": 2.0, "text": "coffee"}, "E011"),
    ([1, 2], "E033"),
]


def ndjson(recs) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in recs)


@pytest.mark.parametrize("bad,code", BAD, ids=[c for _, c in BAD])
def test_a_bad_record_mid_batch_is_named_and_changes_nothing(bad, code):
    raw = ndjson(GOOD[:2] + [bad] + GOOD[3:])
    errors = {}
    for mode in ("records", "columnar"):
        s = state(mode)
        s.apply({"op": "msgs", "ndjson": ndjson(GOOD[5:] or [dict(GOOD[0], id=99, t=0.0)]).decode()})
        before = (s.position, s.window_size, len(s.vocabulary), s.seq, s.engine.window_ids().tolist())
        logged: list = []
        with pytest.raises(InputError) as err:
            s.apply({"op": "msgs", "ndjson": raw.decode()}, before=logged.append)
        assert (s.position, s.window_size, len(s.vocabulary), s.seq, s.engine.window_ids().tolist()) == before
        assert logged == []  # nothing logged either
        errors[mode] = (err.value.code, err.value.line, str(err.value))
    assert errors["columnar"] == errors["records"]
    assert errors["columnar"][:2] == (code, 3)


def test_invalid_json_and_an_id_still_in_the_window():
    s = state("columnar")
    s.apply({"op": "msgs", "ndjson": ndjson(GOOD).decode()})
    with pytest.raises(InputError) as err:
        s.apply({"op": "msgs", "ndjson": '{"id": 7, "x": 1, "y": 2, "t": 9, "text": "a b"}\n\n{"id": 8,\n'})
    assert (err.value.code, err.value.line) == ("E010", 3)
    with pytest.raises(InputError) as err:
        s.apply({"op": "msgs", "ndjson": ndjson([dict(GOOD[0], id=50, t=9.0), dict(GOOD[0], id=3, t=9.0)]).decode()})
    assert (err.value.code, err.value.line) == ("E019", 2)
    assert s.position == 5


@pytest.mark.parametrize("seconds", [None, 2.5])
def test_window_records_follow_the_engine_window(seconds):
    s = state("columnar", window=7, seconds=seconds)
    t = 0.0
    for b in range(6):
        recs = [{"id": 100 * b + i, "x": 1.0, "y": 2.0, "t": t + 0.5 * i, "text": f"coffee w{i % 3}"}
                for i in range(b + 1)]
        t += 0.5 * (b + 1)
        s.apply({"op": "msgs", "ndjson": ndjson(recs).decode()})
        if seconds is not None and b % 2:
            t += 1.0
            s.apply({"op": "advance", "t": t})
        assert [r[0] for r in s.window_records()] == s.engine.window_ids().tolist()
        assert s.window_size == len(s.engine.window_ids())
    newest = s.last_messages(2)
    assert [m["id"] for m in newest] == s.engine.window_ids().tolist()[-2:] and "text" in newest[0]


def test_columnar_events_fold_into_the_engine_results():
    s = state("columnar", window=30)
    rng = np.random.default_rng(3)
    for sid in range(20):
        s.apply({"op": "sub", "rec": {"id": sid, "x": float(rng.uniform(0, 5)), "y": float(rng.uniform(0, 5)),
                                      "k": 3, "alpha": 0.5, "text": str(rng.choice(["coffee", "pizza", "metro"]))}})
    folded: dict[int, dict[int, float]] = {sid: {} for sid in range(20)}
    seq = s.seq
    for b in range(8):
        recs = [{"id": 1000 + 40 * b + i, "x": float(rng.uniform(0, 5)), "y": float(rng.uniform(0, 5)),
                 "t": float(b), "text": " ".join(rng.choice(["coffee", "pizza", "metro", "tram"], 2))}
                for i in range(40)]
        _, blocks = s.apply({"op": "msgs", "ndjson": ndjson(recs).decode()})
        for block in blocks:
            for ev in block.events():
                assert ev["seq"] == seq + 1
                seq = ev["seq"]
                json.loads(block.data(ev["seq"] - block.seq0))
                cur = folded[ev["sub"]]
                for i in ev["left"]:
                    del cur[i]
                for e in ev["entered"]:
                    cur[e["id"]] = e["score"]
                ranked = [e["id"] for e in ev["entered"]]
                want = [m.id for m in s.engine.result(ev["sub"]) if m.id in set(ranked)]
                assert ranked == want  # entered in ranking order
    for sid in range(20):
        assert folded[sid] == {m.id: m.score for m in s.engine.result(sid)}


def test_a_failed_log_append_changes_nothing(tmp_path):
    """The log record is appended before the state applies: an append that fails leaves the
    state as it was (messages: not applied; a subscription change: undone), and the log file
    holds no partial record."""
    from skype.service.wal import Log

    s = state("columnar")
    s.apply({"op": "sub", "rec": {"id": 1, "x": 1.0, "y": 2.0, "k": 2, "alpha": 0.5, "text": "coffee"}})
    s.apply({"op": "msgs", "ndjson": ndjson(GOOD[:2]).decode()})
    before = (s.position, s.window_size, len(s.vocabulary), s.seq, s.engine.window_ids().tolist(),
              [m.id for m in s.engine.result(1)], s.record(1))

    def fail(cmd):
        raise OSError("disk full")

    with pytest.raises(OSError):
        s.apply({"op": "msgs", "ndjson": ndjson(GOOD[2:]).decode()}, before=fail)
    with pytest.raises(OSError):
        s.apply({"op": "sub", "rec": {"id": 1, "x": 1.0, "y": 2.0, "k": 1, "alpha": 0.5, "text": "new5"}},
                before=fail)
    with pytest.raises(OSError):
        s.apply({"op": "unsub", "id": 1}, before=fail)
    assert (s.position, s.window_size, len(s.vocabulary), s.seq, s.engine.window_ids().tolist(),
            [m.id for m in s.engine.result(1)], s.record(1)) == before

    log = Log(tmp_path, "never")
    list(log.recover(0))
    log.append({"op": "advance", "t": 1.0})
    real = log._fh

    class Torn:
        def __init__(self):
            self.calls = 0

        def write(self, data):
            self.calls += 1
            if self.calls == 1:
                return real.write(bytes(data)[:5])  # a short write, then an error
            raise OSError("I/O error")

        def __getattr__(self, name):
            return getattr(real, name)

    log._fh = Torn()
    with pytest.raises(OSError):
        log.append({"op": "advance", "t": 2.0})
    log._fh = real
    log.append({"op": "advance", "t": 3.0})
    log.close()
    assert [cmd["t"] for _, cmd in Log(tmp_path, "never").recover(0)] == [1.0, 3.0]


@pytest.mark.parametrize("wide", [False, True])
def test_by_sub_then_message_is_lexsort(wide):
    """The events' order of a change log (one combined key, or two when the ids are wide)."""
    from skype.service.state import _by_sub_then_message

    rng = np.random.default_rng(11)
    for n in (0, 1, 2, 50, 3000):
        span = 2**62 if wide else 5000
        sub = rng.integers(-span, span, n) if n % 2 else rng.integers(0, 30, n)  # ties, repeats
        msg = rng.integers(-span, span, n)
        if n > 10:
            msg[: n // 3] = msg[0]  # equal pairs: the order keeps their positions
            sub[: n // 3] = sub[0]
        assert _by_sub_then_message(sub, msg).tolist() == np.lexsort((msg, sub)).tolist()
