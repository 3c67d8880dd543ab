"""CPU of the stream fan-out per event, in process (indicative; no sockets, no server).

Builds a :class:`~skype.service.hub.Hub` and a :class:`~skype.service.fanout.Fanout` with
``--connections`` connections following ``--per-connection`` subscriptions each (transports that
only count bytes: the ``send`` system calls are left out), publishes ``--blocks`` blocks of
``--events`` top-k events (random subscriptions among the followed ones, 0-3 entries in and out),
and reports the process CPU per event of the whole fan-out (membership test, encoding, frames,
one write per connection per block), of the encoding alone (msgspec, ``EventBlock.encode``), and
of what ``main`` did per event and listener before (a dict and ``json.dumps``).

    PYTHONPATH=. python bench/service_fanout_cpu.py                                   # 1,000 SSE x 1
    PYTHONPATH=. python bench/service_fanout_cpu.py --kind ws --per-connection 10 --events 2900
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skype.service.events import EventBlock  # noqa: E402
from skype.service.fanout import Connection, Fanout  # noqa: E402
from skype.service.hub import Hub  # noqa: E402
from skype.service.metrics import Metrics  # noqa: E402


class CountingTransport:
    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        pass


def random_block(seq0: int, subs: np.ndarray, rng: np.random.Generator) -> EventBlock:
    n = len(subs)
    ptr = np.r_[0, np.cumsum(rng.integers(0, 4, n))].astype(np.int64)
    lptr = np.r_[0, np.cumsum(rng.integers(0, 4, n))].astype(np.int64)
    return EventBlock(seq0, np.sort(subs).astype(np.int64), 7, ent_ptr=ptr,
                      ent_ids=rng.integers(0, 10**6, ptr[-1]), ent_scores=rng.random(ptr[-1]),
                      left_ptr=lptr, left_ids=rng.integers(0, 10**6, lptr[-1]))


async def measure(args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(args.seed)
    hub = Hub(retain=10**8)
    fanout = Fanout(hub, Metrics())
    for c in range(args.connections):
        fanout.attach(Connection(CountingTransport(), args.kind),
                      [c * args.per_connection + j for j in range(args.per_connection)], [])
    followed = args.connections * args.per_connection
    blocks, seq = [], 1
    for _ in range(args.blocks):
        blocks.append(random_block(seq, rng.choice(followed, args.events, replace=False), rng))
        seq += args.events
    cpu = time.process_time()
    for block in blocks:
        hub.publish([block], time.monotonic())
    cpu = time.process_time() - cpu
    fresh = random_block(seq, rng.choice(followed, args.events, replace=False), rng)
    enc = time.process_time()
    fresh.encode(list(range(len(fresh))))
    enc = time.process_time() - enc
    old = time.process_time()
    for i in range(len(fresh)):
        json.dumps(fresh.event(i), ensure_ascii=False, allow_nan=False)
    old = time.process_time() - old
    n = args.blocks * args.events
    return {"fanout_us_per_event": 1e6 * cpu / n, "encode_us_per_event": 1e6 * enc / args.events,
            "dict_json_dumps_us_per_event": 1e6 * old / args.events}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=("sse", "ws"), default="sse")
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--per-connection", type=int, default=1)
    p.add_argument("--events", type=int, default=290, help="events per block, all followed (default: %(default)s)")
    p.add_argument("--blocks", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for key, value in asyncio.run(measure(args)).items():
        print(f"{key:<30} {value:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
