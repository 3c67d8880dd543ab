"""A real server for the service tests: ``python -m skype.run serve`` in a subprocess on loopback.

``ServerProcess(data_dir, *args)`` picks a free port, starts the server with this checkout on
``PYTHONPATH``, and waits until ``GET /healthz`` answers ``ok``; ``kill()`` is SIGKILL,
``stop()`` SIGTERM (the graceful shutdown), ``start()`` again reuses the data directory and port.
Every service test starts its servers through it (``service_server`` re-exports it as ``Server``).
The server runs from this checkout, or from ``$SKYPE_SERVER_ROOT`` when set.
The server's output goes to ``data_dir/../server-N.log``, printed when a start fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, data_dir: Path, *args: str, port: int | None = None, ready_timeout: float = 120.0) -> None:
        self.data_dir = Path(data_dir)
        self.args = list(args)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_path: Path | None = None

    def start(self) -> ServerProcess:
        self.starts += 1
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-server-{self.starts}.log"
        root = os.environ.get("SKYPE_SERVER_ROOT", str(ROOT))  # another checkout's server, if asked
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "skype.run", "serve", "--data-dir", str(self.data_dir),
               "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).json().get("status") == "ok":
                    return self
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server not ready within {self.ready_timeout} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path and self.log_path.exists() else ""

    def kill(self) -> int | None:
        """SIGKILL; the exit status (None when no server runs)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        return None if self.proc is None else self.proc.returncode

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """SIGTERM (the graceful shutdown; SIGKILL after 60 s), or ``sig``; the exit status."""
        if sig == signal.SIGKILL:
            return self.kill()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        return None if self.proc is None else self.proc.returncode

    @property
    def log(self) -> Path:
        """The current start's log file (the server's stdout and stderr)."""
        assert self.log_path is not None
        return self.log_path

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
