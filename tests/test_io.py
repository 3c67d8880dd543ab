import json

import pytest

from skype import InputError, Match
from skype import io


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_messages_jsonl_text_terms_and_optional_t(tmp_path):
    p = _write(tmp_path / "m.jsonl", [
        json.dumps({"id": 1, "x": 1.0, "y": 2.0, "t": 5.0, "text": "hello world"}),
        "",
        json.dumps({"id": 2, "x": 1.5, "y": 2.5, "terms": {"a": 2.0}}),
    ])
    recs = list(io.read_messages(p))
    assert [line for line, _ in recs] == [1, 3]
    assert recs[0][1].text == "hello world" and recs[0][1].t == 5.0
    assert recs[1][1].terms == {"a": 2.0} and recs[1][1].t is None


def test_malformed_json_reports_file_and_line(tmp_path):
    p = _write(tmp_path / "m.jsonl", [json.dumps({"id": 1, "x": 0, "y": 0, "text": "a b"}), "{not json"])
    with pytest.raises(InputError) as err:
        list(io.read_messages(p))
    assert err.value.code == "E010" and err.value.line == 2 and "m.jsonl" in str(err.value)


def test_missing_field_and_wrong_type_name_the_line(tmp_path):
    p = _write(tmp_path / "s.jsonl", [json.dumps({"id": 1, "x": 0, "y": 0, "alpha": 0.5, "text": "a"})])
    with pytest.raises(InputError) as err:
        list(io.read_subscriptions(p))
    assert err.value.code == "E011" and err.value.line == 1 and "'k'" in str(err.value)
    p = _write(tmp_path / "e.jsonl", [json.dumps({"op": "boom"})])
    with pytest.raises(InputError) as err:
        list(io.read_events(p))
    assert err.value.code == "E018"


def test_unsupported_suffix():
    with pytest.raises(InputError) as err:
        list(io.iter_objects("data.csv"))
    assert err.value.code == "E024"


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_workload_round_trips_exactly(tmp_path, suffix, tweets_small):
    w = tweets_small
    n = io.write_objects(tmp_path / f"m{suffix}", io.message_objects(w.messages.slice(0, 50), w.vocabulary))
    assert n == 50
    back = [m for _, m in io.read_messages(tmp_path / f"m{suffix}")]
    for i, m in enumerate(back):
        ids, ws = w.messages.terms.row(i)
        assert m.id == w.messages.ids[i] and m.x == w.messages.x[i] and m.t == w.messages.t[i]
        assert m.terms == {w.vocabulary.term(int(t)): float(x) for t, x in zip(ids, ws)}
    io.write_objects(tmp_path / f"s{suffix}", io.subscription_objects(w.subscriptions.slice(0, 20), w.vocabulary))
    subs = [s for _, s in io.read_subscriptions(tmp_path / f"s{suffix}")]
    assert [s.id for s in subs] == list(range(20)) and all(s.k == 20 for s in subs)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_results_round_trip_including_empty_topk(tmp_path, suffix):
    results = [(1, [Match(10, 0.5), Match(11, 0.25)]), (2, [])]
    io.write_objects(tmp_path / f"r{suffix}", io.result_objects(results))
    assert io.read_results(tmp_path / f"r{suffix}") == dict(results)
