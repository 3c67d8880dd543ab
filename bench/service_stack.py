"""A trivial JSON endpoint on aiohttp and on Starlette with uvicorn: the stack choice of
``skype.service`` (indicative: one sequential keep-alive client on a shared machine).

    python bench/service_stack.py
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import requests

AIOHTTP = """
import sys
from aiohttp import web
async def health(request):
    return web.json_response({"status": "ok"})
app = web.Application()
app.router.add_get("/healthz", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""
STARLETTE = """
import sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
async def health(request):
    return JSONResponse({"status": "ok"})
app = Starlette(routes=[Route("/healthz", health)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(requests_per_round: int = 2000) -> None:
    for name, code in (("aiohttp", AIOHTTP), ("starlette+uvicorn", STARLETTE)):
        port = free_port()
        url = f"http://127.0.0.1:{port}/healthz"
        proc = subprocess.Popen([sys.executable, "-c", code, str(port)])
        session = requests.Session()
        for _ in range(100):
            try:
                session.get(url)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        rates = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(requests_per_round):
                session.get(url)
            rates.append(requests_per_round / (time.perf_counter() - t0))
        status = open(f"/proc/{proc.pid}/status").read().splitlines()
        rss_kb = int(next(line for line in status if line.startswith("VmRSS")).split()[1])
        print(f"{name}: {max(rates):.0f} req/s (best of 3 x {requests_per_round} sequential keep-alive requests), "
              f"RSS {rss_kb // 1024} MB")
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
