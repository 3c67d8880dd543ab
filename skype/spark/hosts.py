"""Engine hosts: where a partition's live engine (or a merge bucket's state) stays between batches.

**Why not just a module-level cache in the Python worker.**  Spark runs a task's Python code in
any idle worker of the executor's pool (a FIFO queue): measured in local[2], the same partition
key met a different worker process in about half of the batches, so a per-worker cache would
miss that often and every miss rebuilds the engine from durable state.  A *host* is a process
that every worker of the executor talks to over a Unix socket, so the live engine survives
whichever worker runs the task.  An executor has ``slots`` hosts (default: its cores); a key is
served by slot ``spark partition id mod slots`` (its task's partition, fixed for the query), so
tasks running at the same time mostly meet different hosts, and a host serves different keys in
parallel threads (the engine releases the GIL) while requests for one key queue.

**Validation (never serve state that was not committed).**  Each object in a host carries the
``(version, tag)`` of the durable state it reflects.  A task reads the committed ``(version,
tag)`` from the state store and sends it with the batch; the host applies the batch only on an
exact match, else answers ``miss`` and the task sends the durable state for a rebuild.  The host
marks the object invalid before applying and stamps the task's new ``(version + 1, fresh random
tag)`` after, so a task that fails after the host applied its batch (state store not committed)
leaves a stamp no committed state carries: the retry rebuilds.

**Lifecycle.**  A host is started by the first task that needs it (under a file lock), in the
process group of the executor's Python daemon, so it ends with it (the daemon sends its group
SIGHUP when the executor stops).  It also exits when the process it watches (the daemon) is gone,
or after ``idle_timeout`` seconds without a request.  An *object* without a request for
``min(idle_timeout, OBJECT_IDLE_S)`` seconds is evicted (its key moved to another executor or
slot; its copy here would never be used again: a stale stamp is also dropped at the first miss).  Socket paths are
``<tmp>/skype-hosts-<uid>/<run token>/<watch pid>-<stage>-<key>.sock``: one host per run, executor,
stage and key; the run token also authenticates the connection.

:class:`InProcessHosts` keeps the objects in the calling process instead (tests, and
``--engine-cache worker``): same protocol, same validation.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import secrets
import signal
import socket
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Client, Listener
from typing import Any

from skype.errors import SkypeError

PARTITION = "partition"
MERGE = "merge"
INVALID = (-1, -1)
OBJECT_IDLE_S = 300.0  # an object without a request for this long is evicted (its key moved)


class HostError(SkypeError):
    """An engine host could not be started or reached."""


# --------------------------------------------------------------------------- the work itself


class HostedObjects:
    """Objects by (stage, key) with their (ident, version, tag) stamp; handles requests."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, int], tuple[Any, tuple[int, int], Any]] = {}
        self.used: dict[tuple[str, int], float] = {}  # last request for each object (monotonic)

    def evict_idle(self, max_idle: float, now: float | None = None) -> list[tuple[str, int]]:
        """Forget objects without a request for ``max_idle`` seconds: a key that moved to another
        executor (or a run that ended) leaves its copy here, and nothing else would free it."""
        now = time.monotonic() if now is None else now
        gone = [k for k, t in list(self.used.items()) if now - t > max_idle]
        for k in gone:
            self.evict(k)
        return gone

    def evict(self, ident: tuple[str, int]) -> None:
        self.objects.pop(ident, None)
        self.used.pop(ident, None)

    def handle(self, request: tuple) -> tuple:
        op = request[0]
        if op in ("apply", "rebuild", "snapshot", "results", "drop"):
            self.used[(request[1], request[2])] = time.monotonic()
        if op == "ping":
            return ("pong", os.getpid(), len(self.objects))
        if op == "apply":
            _, stage, key, ident, committed, new, inputs, want_snapshot = request
            entry = self.objects.get((stage, key))
            if entry is None or entry[0] != ident or entry[1] != tuple(committed):
                self.objects.pop((stage, key), None)  # stale: free it before the rebuild arrives
                return ("miss", entry is None)
            return self._apply(stage, key, ident, entry[2], new, inputs, want_snapshot, rebuilt=False)
        if op == "rebuild":
            _, stage, key, ident, durable, new, inputs, want_snapshot = request
            self.objects.pop((stage, key), None)
            t0 = time.perf_counter()
            core = build_core(stage, ident, durable)
            rebuild_s = time.perf_counter() - t0
            return self._apply(stage, key, ident, core, new, inputs, want_snapshot, rebuilt=True, rebuild_s=rebuild_s)
        if op in ("snapshot", "results"):  # of the object at exactly this stamp
            _, stage, key, stamp = request
            entry = self.objects.get((stage, key))
            if entry is None or entry[1] != tuple(stamp):
                return ("miss", entry is None)
            return ("ok", entry[2].snapshot() if op == "snapshot" else entry[2].final_results())
        if op == "drop":
            self.objects.pop((request[1], request[2]), None)
            self.used.pop((request[1], request[2]), None)
            return ("ok",)
        raise HostError(f"unknown host request {op!r}")

    def _apply(self, stage, key, ident, core, new, inputs, want_snapshot, *, rebuilt, rebuild_s=0.0):
        self.objects[(stage, key)] = (ident, INVALID, core)  # invalid while the batch runs
        output = core.apply(inputs)
        snapshot = core.snapshot() if want_snapshot else None
        self.objects[(stage, key)] = (ident, tuple(new), core)
        return ("ok", output, snapshot, {"rebuilt": rebuilt, "rebuild_s": rebuild_s, "host_pid": os.getpid(),
                                         "host_peak_rss_bytes": peak_rss_bytes(), "host_objects": len(self.objects)})


def peak_rss_bytes() -> int:
    """This process's peak resident set size (Linux reports kilobytes)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def build_core(stage: str, ident: tuple, durable: tuple):
    """A core from durable state (see :meth:`PartitionCore.rebuild`, :meth:`MergeCore.rebuild`)."""
    if stage == PARTITION:
        from skype.dskype.partition import PartitionCore

        config = ident[1]
        hwm_seq, hwm_t, log, segments = durable
        return PartitionCore.rebuild(config, hwm_seq, hwm_t, log, segments)
    from skype.dskype.merge import MergeCore

    return MergeCore.rebuild(list(durable))


# --------------------------------------------------------------------------- clients


class InProcessHosts:
    """Objects kept in this process (a module-level registry shared by every task it runs)."""

    _registry = HostedObjects()
    _lock = threading.Lock()

    def call(self, stage: str, key: int, request: tuple) -> tuple:
        with self._lock:
            return self._registry.handle(request)

    @classmethod
    def clear(cls) -> None:
        with cls._lock:
            cls._registry.objects.clear()


_connections: dict[str, Any] = {}


def socket_dir(token: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"skype-hosts-{os.getuid()}", token)


class ProcessHosts:
    """``slots`` host processes per watched process (executor) on this machine (see module doc).

    ``watch_pid``: the process whose end ends the hosts; default the parent of the calling
    process (inside a Spark Python worker: the executor's Python daemon).
    """

    def __init__(self, token: str, idle_timeout: float = 600.0, watch_pid: int | None = None,
                 start_timeout: float = 60.0, slots: int | None = None) -> None:
        self.token = token
        self.idle_timeout = float(idle_timeout)
        self.watch_pid = watch_pid
        self.start_timeout = float(start_timeout)
        self.slots = max(1, int(slots or os.cpu_count() or 1))

    def path(self, stage: str, key: int) -> str:
        watch = self.watch_pid if self.watch_pid is not None else os.getppid()
        slot = _task_partition(key) % self.slots
        return os.path.join(socket_dir(self.token), f"{watch}-{slot}.sock")

    def call(self, stage: str, key: int, request: tuple) -> tuple:
        path = self.path(stage, key)
        for attempt in range(2):
            conn = _connections.get(path)
            try:
                if conn is None:
                    conn = self._connect(path)
                conn.send(request)
                reply = conn.recv()
            except (EOFError, OSError, ConnectionError) as err:
                _connections.pop(path, None)
                if attempt == 1:
                    raise HostError(f"engine host {path} failed: {err}") from err
                continue
            if reply[0] == "error":
                raise HostError(f"engine host {path}: {reply[1]}")
            return reply
        raise AssertionError("unreachable")

    def stop(self, stage: str, key: int) -> None:
        """Ask a host to exit (used by tests and by the driver in local mode)."""
        path = self.path(stage, key)
        conn = _connections.pop(path, None)
        try:
            conn = conn or Client(path, family="AF_UNIX", authkey=self.token.encode())
            conn.send(("stop",))
            conn.close()
        except (OSError, EOFError, ConnectionError):
            pass

    def _connect(self, path: str):
        authkey = self.token.encode()
        try:
            conn = Client(path, family="AF_UNIX", authkey=authkey)
        except (FileNotFoundError, ConnectionRefusedError):
            self._start(path)
            conn = Client(path, family="AF_UNIX", authkey=authkey)
        _connections[path] = conn
        return conn

    def _start(self, path: str) -> None:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _connectable(path):
                return
            if os.path.exists(path):
                os.unlink(path)  # a dead host's socket
            watch = self.watch_pid if self.watch_pid is not None else os.getppid()
            _spawn_detached([sys.executable, "-m", "skype.spark.hosts", "--socket", path, "--watch-pid", str(watch),
                             "--idle-timeout", str(self.idle_timeout)],
                            {**os.environ, "SKYPE_HOST_AUTHKEY": self.token}, path + ".log")
            deadline = time.monotonic() + self.start_timeout
            while not _connectable(path):
                if time.monotonic() > deadline:
                    raise HostError(f"engine host {path} did not start (see {path}.log)")
                time.sleep(0.02)


def _task_partition(key: int) -> int:
    """The running Spark task's partition id (fixed per key within a query), else the key."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None:
            return int(ctx.partitionId())
    except ImportError:
        pass
    return int(key)


def _connectable(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _spawn_detached(argv: list[str], env: dict, log_path: str) -> None:
    """Start ``argv`` as a grandchild (no zombie left behind) in this process group."""
    pid = os.fork()
    if pid == 0:  # child: fork the host and leave at once
        try:
            if os.fork() == 0:
                devnull = os.open(os.devnull, os.O_RDWR)
                log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)
                os.dup2(log, 2)
                os.closerange(3, 1 << 16)
                os.execve(argv[0], argv, env)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def new_token() -> str:
    return secrets.token_hex(8)


# --------------------------------------------------------------------------- the host process


def serve(path: str, authkey: bytes, watch_pid: int, idle_timeout: float) -> None:
    """Serve requests on ``path`` until stopped, idle, or the watched process is gone."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    objects = HostedObjects()
    registry = threading.Lock()
    key_locks: dict[tuple, threading.Lock] = {}
    state = {"last": time.monotonic(), "stop": False}
    object_idle = min(idle_timeout, OBJECT_IDLE_S)

    def lock_of(request: tuple) -> threading.Lock:
        ident = tuple(request[1:3]) if len(request) > 2 else ("", -1)
        with registry:
            return key_locks.setdefault(ident, threading.Lock())
    listener = Listener(path, family="AF_UNIX", authkey=authkey)

    def client(conn) -> None:
        with conn:
            while not state["stop"]:
                try:
                    request = conn.recv()
                except (EOFError, OSError):
                    return
                if request[0] == "stop":
                    state["stop"] = True
                    return
                with lock_of(request):
                    state["last"] = time.monotonic()
                    try:
                        reply = objects.handle(request)
                    except Exception as err:  # the task raises it and fails (Spark retries the task);
                        reply = ("error", f"{type(err).__name__}: {err}")  # the object stays invalid
                    state["last"] = time.monotonic()
                try:
                    conn.send(reply)
                except (OSError, EOFError):
                    return

    def watchdog() -> None:
        while not state["stop"]:
            time.sleep(1.0)
            if not _alive(watch_pid) or time.monotonic() - state["last"] > idle_timeout:
                state["stop"] = True
            with registry:  # objects of keys that moved away (a running request holds its key's lock)
                now = time.monotonic()
                for k in [k for k, t in list(objects.used.items()) if now - t > object_idle]:
                    lock = key_locks.get(k)
                    if lock is None or lock.acquire(blocking=False):
                        objects.evict(k)
                        if lock is not None:
                            lock.release()
        try:  # wake the accept loop
            Client(path, family="AF_UNIX", authkey=authkey).close()
        except (OSError, EOFError, ConnectionError):
            pass

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        while not state["stop"]:
            try:
                conn = listener.accept()
            except (OSError, EOFError, ConnectionError):
                continue
            if state["stop"]:
                conn.close()
                break
            threading.Thread(target=client, args=(conn,), daemon=True).start()
    finally:
        listener.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skype.spark.hosts", description="engine host (internal)")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--watch-pid", type=int, required=True)
    parser.add_argument("--idle-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    authkey = os.environ.pop("SKYPE_HOST_AUTHKEY", "").encode()
    serve(args.socket, authkey, args.watch_pid, args.idle_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
