"""Every bad-input class answers with its catalogue code, for both engines, and from files with
the file, line and record named; ``--on-error skip`` counts each one.  Also the limits (k, terms
per record), ids reused after expiry or unsubscription, and the 64-bit arithmetic where k
scales."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skype import Engine, InputError, Message, ReferenceEngine, Subscription
from skype import io
from skype.run import main
from skype.validate import MAX_K

ENGINES = [Engine, ReferenceEngine]


def _code(fn, *args, **kw) -> InputError:
    with pytest.raises(InputError) as err:
        fn(*args, **kw)
    return err.value


def _sub(i=1, **kw):
    base = dict(id=i, x=1.0, y=1.0, k=2, alpha=0.5, terms={"pizza": 1.0})
    base.update(kw)
    return Subscription(**base)


def _msg(i=1, **kw):
    base = dict(id=i, x=1.0, y=1.0, terms={"pizza": 1.0})
    base.update(kw)
    return Message(**base)


# --------------------------------------------------------------------------- engine API


@pytest.mark.parametrize("E", ENGINES)
def test_advance_errors(E):
    e = E(window_seconds=10.0)
    e.publish(_msg(1, t=5.0))
    assert _code(e.advance, 4.0).code == "E009"  # backwards
    for bad in (math.nan, math.inf, -math.inf):
        assert _code(e.advance, bad).code == "E021"
    assert _code(e.advance, "6").code == "E012"
    assert e.advance(5.0) == [] and e.clock == 5.0  # the same time again is fine
    c = E(window=3)
    assert _code(c.advance, 1.0).code == "E023"  # a count window has no clock to move


@pytest.mark.parametrize("E", ENGINES)
@pytest.mark.parametrize("t, code", [(math.inf, "E021"), (-math.inf, "E021"), (math.nan, "E021"), ("1", "E012")])
def test_non_finite_timestamps(E, t, code):
    e = E(window_seconds=10.0)
    err = _code(e.publish, _msg(7, t=t))
    assert err.code == code and err.record_id == 7
    assert e.window_ids().tolist() == []


@pytest.mark.parametrize("E", ENGINES)
@pytest.mark.parametrize("bad", ["7", 1.5, True, None, 2**63, -(2**63) - 1, np.float64(3.0)])
def test_bad_id_types(E, bad):
    e = E(window=5)
    e.subscribe(_sub(1))
    assert _code(e.subscribe, _sub(bad)).code == "E025"
    assert _code(e.publish, _msg(bad)).code == "E025"
    for method in (e.unsubscribe, e.topk):
        assert _code(method, bad).code == "E025"
    assert _code(e.topn, bad, 1).code == "E025"


@pytest.mark.parametrize("E", ENGINES)
@pytest.mark.parametrize("n", [-1, 1.5, True, "2", None])
def test_topn_rejects_a_bad_n(E, n):
    e = E(window=5)
    e.subscribe(_sub(1))
    err = _code(e.topn, 1, n)
    assert err.code == "E023" and "n must be" in str(err)
    assert e.topn(1, 0) == []


@pytest.mark.parametrize("E", ENGINES)
def test_k_limit(E):
    e = E(window=5)
    err = _code(e.subscribe, _sub(1, k=MAX_K + 1))
    assert err.code == "E029" and err.record_id == 1 and str(MAX_K) in str(err)
    assert _code(e.subscribe, _sub(1, k=0)).code == "E003"
    assert e.subscribe(_sub(2, k=MAX_K)) == []
    from skype.model import SubscriptionBatch, TermMatrix

    batch = SubscriptionBatch([3, 4], [1.0, 1.0], [1.0, 1.0], [5, MAX_K + 1], [0.5, 0.5],
                              TermMatrix([0, 1, 2], [0, 0], [1.0, 1.0]))
    err = _code(e.subscribe_batch, batch)
    assert err.code == "E029" and err.record_id == 4


@pytest.mark.parametrize("E", ENGINES)
def test_terms_per_record_limit(E):
    from skype.model import MessageBatch, TermMatrix
    from skype.text import MAX_TERMS

    e = E(window=5)
    err = _code(e.subscribe, _sub(1, terms={f"t{i}": 1.0 for i in range(MAX_TERMS + 1)}))
    assert err.code == "E030" and err.record_id == 1
    err = _code(e.publish, _msg(2, terms={f"t{i}": 1.0 for i in range(MAX_TERMS + 1)}))
    assert err.code == "E030" and err.record_id == 2
    n = MAX_TERMS + 1
    batch = MessageBatch([9], [1.0], [1.0], [0.0], TermMatrix([0, n], np.arange(n), np.full(n, 1 / math.sqrt(n))))
    err = _code(e.publish_batch, batch)
    assert err.code == "E030" and err.record_id == 9


@pytest.mark.parametrize("E", ENGINES)
def test_nfd_text_matches_nfc_terms(E):
    e = E(window=5)
    e.subscribe(_sub(1, terms=None, text="Caf\u00e9"))
    changes = e.publish(_msg(1, terms=None, text="cafe\u0301 au lait"))
    assert [c.entered for c in changes] == [(1,)]
    e.subscribe(_sub(2, terms={"CAFE\u0301": 1.0}))
    assert [m.id for m in e.topk(2)] == [1]


def test_message_id_reused_after_expiry_and_subscription_id_reused():
    """Both engines accept a message id again once its message left the window (not before),
    and a subscription id again after unsubscribe, and agree on everything."""
    engines = [Engine(window=2), ReferenceEngine(window=2)]
    for e in engines:
        e.subscribe(_sub(1, k=3))
    for i, mid in enumerate([10, 11, 12, 10, 11]):  # 10 expired when 12 arrived
        out = [e.publish(_msg(mid, x=1.0 + i * 0.1)) for e in engines]
        assert out[0] == out[1]
    for e in engines:
        assert _code(e.publish, _msg(11)).code == "E019"  # still in the window
        e.unsubscribe(1)
        assert e.subscribe(_sub(1, k=1, x=2.0)) == e.topk(1)
    assert engines[0].topk(1) == engines[1].topk(1) and len(engines[0].topk(1)) == 1
    assert engines[0].window_ids().tolist() == engines[1].window_ids().tolist() == [10, 11]


def test_k_and_cost_factors_scale_in_64_bits():
    """k at the limit with cost factors that put nmax_factor * k and refresh_factor * k far
    beyond 32 bits: the core stays exact (reevaluation.pyx computes both in 64 bits)."""
    cost = {"nmax_factor": 10**6, "refresh_factor": 1e6}
    engines = [Engine(window=40, cost=cost), Engine(window=40, buffer="cskyband", cost=cost, index="ipt"),
               ReferenceEngine(window=40)]
    rng = np.random.default_rng(0)
    for e in engines:
        e.subscribe(_sub(1, k=MAX_K, alpha=0.3))
        e.subscribe(_sub(2, k=3, alpha=0.7, terms={"pizza": 1.0, "beer": 2.0}))
    for i in range(150):
        m = _msg(i, x=float(rng.uniform(0, 5)), terms={"pizza": 1.0} if i % 3 else {"beer": 1.0})
        outs = [e.publish(m) for e in engines]
        assert outs[0] == outs[2] and outs[1] == outs[2]
    assert [e.topk(1) for e in engines[:2]] == [engines[2].topk(1)] * 2
    assert len(engines[2].topk(1)) == sum(1 for i in range(110, 150) if i % 3)  # every pizza in the window


# --------------------------------------------------------------------------- files


def _lines(path, lines: list[bytes]):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _ok(i, **kw):
    rec = {"id": i, "x": 1.0, "y": 1.0, "t": float(i), "text": "pizza slice"}
    rec.update(kw)
    return json.dumps(rec).encode()


@pytest.mark.parametrize("line, code", [
    (b'{"id": 5, "x": 1.0, "y": 1.0, "text": "caf\xe9"}', "E031"),  # latin-1, not UTF-8
    (b"\xff\xfe{}", "E031"),
    (b"[1, 2, 3]", "E033"),
    (b"42", "E033"),
    (b'"a string"', "E033"),
    (b"null", "E033"),
])
def test_jsonl_bad_lines_name_file_and_line(tmp_path, line, code):
    p = _lines(tmp_path / "m.jsonl", [_ok(0), line, _ok(2)])
    err = _code(lambda: list(io.read_messages(p)))
    assert err.code == code and err.line == 2 and err.source == str(p) and "m.jsonl" in str(err)


def _parquet(path, table):
    pq.write_table(table, path)
    return path


def test_corrupt_parquet(tmp_path):
    p = tmp_path / "m.parquet"
    p.write_bytes(b"PAR1 this is not a parquet file")
    err = _code(lambda: list(io.read_messages(p)))
    assert err.code == "E032" and err.source == str(p)
    good = _parquet(tmp_path / "g.parquet", pa.table({"id": [1, 2], "x": [1.0, 1.0], "y": [1.0, 1.0],
                                                      "text": ["a b", "c d"]}))
    data = good.read_bytes()
    (tmp_path / "t.parquet").write_bytes(data[: len(data) // 2])  # truncated
    assert _code(lambda: list(io.read_messages(tmp_path / "t.parquet"))).code == "E032"


@pytest.mark.parametrize("column, values, code", [
    ("x", ["1.0", "2.0"], "E012"),  # strings where numbers belong
    ("id", ["a", "b"], "E025"),
    ("id", [1.5, 2.5], "E025"),
    ("text", [1, 2], "E012"),
])
def test_parquet_wrong_column_types(tmp_path, column, values, code):
    cols = {"id": [1, 2], "x": [1.0, 1.0], "y": [1.0, 1.0], "text": ["pizza", "pizza"]}
    cols[column] = values
    p = _parquet(tmp_path / "m.parquet", pa.table(cols))
    from skype.validate import check_message
    from skype.model import DEFAULT_BOUNDS
    from skype.text import Vocabulary

    with pytest.raises(InputError) as err:
        for line, m in io.read_messages(p):
            try:
                check_message(m, Vocabulary(), DEFAULT_BOUNDS, 0.0)
            except InputError as e:
                raise e.located(source=str(p), line=line) from None
    assert err.value.code == code and err.value.line == 1 and err.value.source == str(p)


def test_parquet_empty_terms_map_is_an_empty_object(tmp_path):
    terms_t = pa.map_(pa.string(), pa.float64())
    table = pa.table({"id": pa.array([1, 2]), "x": pa.array([1.0, 1.0]), "y": pa.array([1.0, 1.0]),
                      "terms": pa.array([[("a", 1.0)], []], type=terms_t)})
    p = _parquet(tmp_path / "m.parquet", table)
    recs = list(io.read_messages(p))
    assert recs[0][1].terms == {"a": 1.0} and recs[1][1].terms == {}
    err = _code(lambda: ReferenceEngine(window=3).publish(recs[1][1]))
    assert err.code == "E027"


def _run(*args):
    return main([str(a) for a in args])


def test_cli_skips_and_counts_every_file_error(tmp_path, capsys):
    lines = [_ok(0), b"\xff bad", _ok(1), b"[1]", _ok(2), b'{"id": 9, "x": 1, "y": 1, "terms": {}}', _ok(3),
             b'{"id": 10, "x": 1, "y": 1, "t": Infinity, "text": "pizza"}', _ok(4)]
    m = _lines(tmp_path / "m.jsonl", lines)
    s = _lines(tmp_path / "s.jsonl", [json.dumps({"id": 1, "x": 1.0, "y": 1.0, "k": 200_000, "alpha": 0.5,
                                                  "text": "pizza"}).encode(),
                                      json.dumps({"id": 2, "x": 1.0, "y": 1.0, "k": 2, "alpha": 0.5,
                                                  "text": "pizza"}).encode()])
    assert _run("simulate", "--messages", m, "--subscriptions", s, "--window", 3, "--engine", "reference") == 2
    err = capsys.readouterr().err
    assert "m.jsonl" in err and "line 2" in err and "E031" in err
    metrics = tmp_path / "metrics.json"
    assert _run("simulate", "--messages", m, "--subscriptions", s, "--window", 3, "--engine", "reference",
                "--on-error", "skip", "--metrics-out", metrics, "--results-out", tmp_path / "r.jsonl") == 0
    got = json.loads(metrics.read_text())
    assert got["rejected_by_code"] == {"E021": 1, "E027": 1, "E029": 1, "E031": 1, "E033": 1}
    assert got["messages"] == 5 and got["subscriptions"] == 1


def test_cli_corrupt_parquet_fails_or_is_counted(tmp_path, capsys):
    m = tmp_path / "m.parquet"
    m.write_bytes(b"not parquet at all")
    s = _lines(tmp_path / "s.jsonl", [json.dumps({"id": 1, "x": 1.0, "y": 1.0, "k": 2, "alpha": 0.5,
                                                  "text": "pizza"}).encode()])
    assert _run("simulate", "--messages", m, "--subscriptions", s, "--window", 3, "--engine", "reference") == 2
    assert "E032" in capsys.readouterr().err
    metrics = tmp_path / "metrics.json"
    assert _run("simulate", "--messages", m, "--subscriptions", s, "--window", 3, "--engine", "reference",
                "--on-error", "skip", "--metrics-out", metrics) == 0
    assert json.loads(metrics.read_text())["rejected_by_code"] == {"E032": 1}


def test_cli_parquet_events_equal_jsonl_events(tmp_path):
    ev = [
        {"op": "msg", "id": 1, "x": 0.0, "y": 0.0, "t": 0.0, "text": "coffee bar"},
        {"op": "sub", "id": 7, "x": 0.0, "y": 0.0, "k": 2, "alpha": 0.5, "text": "coffee"},
        {"op": "msg", "id": 2, "x": 0.5, "y": 0.0, "t": 1.0, "text": "coffee shop"},
        {"op": "sub", "id": 8, "x": 0.0, "y": 0.0, "k": 2, "alpha": 0.5, "terms": {"shop": 1.0, "bar": 0.5}},
        {"op": "unsub", "id": 7},
        {"op": "msg", "id": 3, "x": 1.0, "y": 0.0, "t": 2.0, "text": "shop coffee bar"},
        {"op": "unsub", "id": 99},
    ]
    results = {}
    for suffix in (".jsonl", ".parquet"):
        p = tmp_path / f"e{suffix}"
        io.write_objects(p, ev)
        metrics = tmp_path / f"m{suffix}.json"
        assert _run("simulate", "--events", p, "--window", 10, "--engine", "core", "--on-error", "skip",
                    "--results-out", tmp_path / f"r{suffix}.jsonl", "--metrics-out", metrics) == 0
        results[suffix] = io.read_results(tmp_path / f"r{suffix}.jsonl")
        assert json.loads(metrics.read_text())["rejected_by_code"] == {"E008": 1}
    assert results[".jsonl"] == results[".parquet"]
    assert [m.id for m in results[".parquet"][8]] == [3, 2]
