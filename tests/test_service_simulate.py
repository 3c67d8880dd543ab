"""``skype.run serve`` against ``skype.run simulate`` on the same files: with the same
vocabulary file, the service's ``GET /v1/results`` equals ``simulate --results-out`` (the same
lines: ids in the same order, the same scores) after the subscriptions and the stream were
sent over HTTP in NDJSON batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests

pytest.importorskip("aiohttp")

from service_server import NDJSON, ROOT, Server, same_results, server_results  # noqa: E402


def run(*args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "skype.run", *args], env=env, check=True, capture_output=True,
                   timeout=300)


def test_results_equal_simulate_with_a_vocabulary_file(tmp_path):
    m, s, v, out = (str(tmp_path / n) for n in ("m.jsonl", "s.jsonl", "v.json", "r.jsonl"))
    run("generate", "--dataset", "tweets", "--num-subs", "150", "--num-messages", "1500", "--text",
        "--messages-out", m, "--subscriptions-out", s)
    run("vocabulary", "--messages", m, "--sample", "1500", "--out", v)
    run("simulate", "--messages", m, "--subscriptions", s, "--vocabulary", v, "--window", "400",
        "--results-out", out, "--no-progress")
    want = {obj["id"]: obj for obj in map(json.loads, open(out))}
    with Server(tmp_path / "data", "--window", "400", "--vocabulary", v) as srv:
        session = requests.Session()
        for line in open(s):
            rec = json.loads(line)
            assert session.put(f"{srv.url}/v1/subscriptions/{rec['id']}", json=rec).status_code == 201
        lines = open(m, "rb").readlines()
        for start in range(0, len(lines), 250):
            r = session.post(srv.url + "/v1/messages", data=b"".join(lines[start:start + 250]), headers=NDJSON)
            assert r.status_code == 200, r.text
        got = server_results(srv.url)
    assert sum(len(line["topk"]) for line in want.values()) > 0
    same_results(got, want)
