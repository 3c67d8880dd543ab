"""A real standalone Spark cluster on 127.0.0.1 (pyspark's ``bin/spark-class`` Master and two
Workers) runs ``spark-submit skype/cli/spark_submit.py`` end to end, one Worker SIGKILLed mid-stream; its
results equal the centralized engine's.  Every process the test starts is stopped at the end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from spark_fixtures import events_workload, first_difference, results_of  # noqa: E402

from skype.run import main  # noqa: E402

pytestmark = pytest.mark.spark  # a Master, two Workers, spark-submit: the default run keeps the real cluster

APP = Path(__file__).resolve().parents[1] / "skype" / "cli" / "spark_submit.py"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _env() -> dict:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1")
    env.pop("SPARK_HOME", None)
    return env


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, timeout: float = 90.0) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        match = re.search(pattern, text)
        if match:
            return match
        if proc.poll() is not None:
            pytest.fail(f"{log.name}: process exited ({proc.returncode}):\n{text[-3000:]}")
        time.sleep(0.2)
    pytest.fail(f"{log.name}: no {pattern!r} within {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def test_spark_standalone_cluster_runs_the_app(tmp_path):
    spark_class = str(_spark_home() / "bin" / "spark-class")
    started: list[subprocess.Popen] = []

    def launch(name: str, argv: list[str]) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"{name}.log"
        fh = open(log, "w")
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=_env(), cwd=tmp_path)
        fh.close()
        started.append(proc)
        return proc, log

    try:
        master, master_log = launch("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                               "127.0.0.1", "--port", "0", "--webui-port", "0"])
        url = _wait_for(master_log, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", master).group(1)
        workers = []
        for i in range(2):
            work_dir = tmp_path / f"work{i}"
            work_dir.mkdir()
            workers.append(launch(f"worker{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host",
                                                 "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", "1",
                                                 "--memory", "1g", "--work-dir", str(work_dir)]))
        for proc, log in workers:
            _wait_for(log, r"Successfully registered with master", proc)

        workload = events_workload(tmp_path / "events.jsonl", num_subs=120, num_messages=1200)
        common = ["--events", str(workload), "--window", "400"]
        submit = [str(_spark_home() / "bin" / "spark-submit"), "--master", url, "--driver-memory", "1g",
                  "--executor-memory", "768m", "--total-executor-cores", "2",
                  "--conf", "spark.ui.enabled=false", "--conf", f"spark.pyspark.python={sys.executable}",
                  str(APP), *common, "--method", "prefix", "--partitions", "2", "--batch-size", "150",
                  "--checkpoint", str(tmp_path / "run"), "--results-out", str(tmp_path / "results.jsonl"), "--metrics-out", str(tmp_path / "metrics.json")]
        out, err = open(tmp_path / "submit.out", "w"), open(tmp_path / "submit.err", "w")
        app = subprocess.Popen(submit, env=_env(), cwd=tmp_path, stdout=out, stderr=err)
        out.close()
        err.close()
        started.append(app)
        # mid-stream (after the second batch committed, 8 in all) one Worker is SIGKILLed: its
        # executor goes with it, the driver reruns the lost tasks on the other executor, whose
        # engine hosts rebuild the lost partitions from the state store
        deadline = time.monotonic() + 400
        while not (tmp_path / "run" / "metrics" / "batch-00000001.json").exists():
            assert app.poll() is None, (tmp_path / "submit.err").read_text()[-4000:]
            assert time.monotonic() < deadline, "the app made no progress"
            time.sleep(0.2)
        assert app.poll() is None
        os.kill(workers[1][0].pid, signal.SIGKILL)
        app.wait(timeout=600)
        stdout, stderr = (tmp_path / "submit.out").read_text(), (tmp_path / "submit.err").read_text()
        problems = [line for line in stderr.splitlines() if re.search(r"Error|Exception|Caused by", line)]
        assert app.returncode == 0, "\n".join(problems[:60]) + "\n...\n" + stderr[-4000:]
        assert re.search(rf"master\s+{re.escape(url)}\n", stdout)
        assert len(list((tmp_path / "run" / "metrics").glob("batch-*.json"))) == 8
        assert main(["simulate", *common, "--results-out", str(tmp_path / "central.jsonl")]) == 0
        got, want = results_of(tmp_path / "results.jsonl"), results_of(tmp_path / "central.jsonl")
        assert got == want, first_difference(got, want)
        executor_logs = list(tmp_path.glob("work*/app-*/*/stderr"))
        assert len({p.parent.parent.parent for p in executor_logs}) == 2  # both workers ran executors
    finally:
        for proc in reversed(started):
            _stop(proc)
