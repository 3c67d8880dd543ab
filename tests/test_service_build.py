"""The library constructor (issue 34, deliverable 6): ``skype.service.create_app(ServiceSettings)``
runs the whole service in-process, as an embedder would, with results equal to the reference;
the CLI's arguments map onto the same settings; a data directory remembers its settings; the
service reaches the engine and the vocabulary through public verbs only."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from service_process import free_port  # noqa: E402
from service_server import reference_results, same_results  # noqa: E402

from skype.errors import InputError  # noqa: E402
from skype.service import ServiceSettings, create_app  # noqa: E402
from skype.service.app import SERVICE  # noqa: E402

WORDS = ["pizza", "pasta", "sushi", "ramen"]


def records(rng: random.Random) -> tuple[list[dict], list[dict]]:
    subs = [{"id": i, "x": rng.uniform(-5, 5), "y": rng.uniform(-5, 5), "k": 3, "alpha": 0.5,
             "text": rng.choice(WORDS)} for i in range(1, 16)]
    msgs = [{"id": 100 + i, "x": rng.uniform(-5, 5), "y": rng.uniform(-5, 5),
             "text": " ".join(rng.sample(WORDS, 2))} for i in range(40)]
    return subs, msgs


@pytest.mark.parametrize("engine", ["core", "reference"])
def test_create_app_runs_in_process(tmp_path, engine):
    rng = random.Random(1)
    subs, msgs = records(rng)

    async def run() -> dict:
        port = free_port()
        settings = ServiceSettings(data_dir=tmp_path / "d", window=25, engine=engine, fsync="never", port=port)
        app = create_app(settings)
        async with TestClient(TestServer(app, port=port)) as client:
            while (r := await client.get("/healthz")).status == 503:  # recovering the (empty) directory
                await asyncio.sleep(0.05)
            assert r.status == 200, await r.text()
            body = "".join(json.dumps(r) + "\n" for r in subs[:10])
            r = await client.post("/v1/subscriptions", data=body, headers={"Content-Type": "application/x-ndjson"})
            assert r.status == 201, await r.text()
            for rec in subs[10:]:
                assert (await client.put(f"/v1/subscriptions/{rec['id']}", json=rec)).status == 201
            body = "".join(json.dumps(r) + "\n" for r in msgs)
            r = await client.post("/v1/messages", data=body, headers={"Content-Type": "application/x-ndjson"})
            assert r.status == 200
            assert app[SERVICE].worker.state.position == len(msgs)
            text = await (await client.get("/v1/results")).text()
        return {obj["id"]: obj for obj in map(json.loads, text.splitlines())}

    got = asyncio.run(run())
    same_results(got, reference_results([("sub", s) for s in subs] + [("msgs", msgs)], window=25))
    # the data directory remembers its settings: another window is refused
    with pytest.raises(InputError, match="E102"):
        asyncio.run(_build(ServiceSettings(data_dir=tmp_path / "d", window=26, engine=engine)))


async def _build(settings: ServiceSettings) -> None:
    create_app(settings)


def test_settings_are_checked():
    with pytest.raises(InputError, match="E022"):
        ServiceSettings(data_dir="x", window=5, engine="nope")
    with pytest.raises(InputError, match="E097"):
        asyncio.run(_build(ServiceSettings(data_dir="x", window=5, host="0.0.0.0")))


def test_cli_arguments_become_settings(tmp_path):
    from skype.cli import serve

    parser = argparse.ArgumentParser()
    serve.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--data-dir", str(tmp_path), "--window", "7", "--allow-origin", "http://a.example",
                              "--allow-origin", "http://b.example", "--fsync", "never", "--engine", "reference"])
    settings = serve.settings_of(args)
    assert settings.window == 7 and settings.fsync == "never" and settings.engine == "reference"
    assert settings.allow_origins == ("http://a.example", "http://b.example")
    assert settings.max_records == 100_000 and settings.host == "127.0.0.1"


def test_the_service_uses_public_verbs_only():
    """No private name of another object (``x._name``) in the service's modules, so the engine
    and the vocabulary can change behind their public verbs."""
    root = Path(__file__).resolve().parents[1] / "skype" / "service"
    private = re.compile(r"\b(?!self\b)[a-z_][a-z0-9_]*\._[a-z]")
    found = [f"{p.name}:{n}: {line.strip()}" for p in sorted(root.glob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if private.search(line.split("#")[0]) and "._value" not in line]
    assert found == [], found
