"""The Spark session of a DSkype run: its settings, and what a batch may hold in the driver's heap.

:func:`make_session` builds the session a run uses (RocksDB state store, Arrow, no UI;
:func:`session_conf`); :func:`configure` applies a plan's query settings to a session the caller
gave.  :func:`commands_cap` bounds the subscription commands one micro-batch may bring, from the
heap that holds the batch (a command costs at most :data:`BYTES_PER_COMMAND` while its batch
runs, and a batch may spend :data:`COMMANDS_SHARE` of the heap).  Nothing here reads or writes
a run's files.
"""

from __future__ import annotations

import os
import sys

from skype.errors import InputError
from skype.dskype.plan import Plan, RunSettings

def default_driver_memory(master: str | None) -> str:
    """The driver memory when none is given.  In local mode the executors run inside the driver's
    JVM, so its heap holds every batch's state traffic and events: a quarter of the machine's
    memory, between 1g and 8g (Spark's fixed 1g ran out in a 1M-subscription batch,
    docs/results-spark.md).  Elsewhere the executors have their own heaps: Spark's 1g.

    >>> default_driver_memory("spark://host:7077")
    '1g'
    >>> default_driver_memory("local[2]") in {f"{g}g" for g in range(1, 9)}
    True
    """
    if not (master or "").startswith("local"):
        return "1g"
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "1g"
    return f"{max(1, min(8, (total // 4) >> 30))}g"


def session_conf(master: str | None, driver_memory: str | None = None) -> dict[str, str]:
    """Spark settings the job needs (TWS requires RocksDB; see platform notes).  ``master`` None:
    left to spark-submit.  ``driver_memory`` None: :func:`default_driver_memory`."""
    return {
        **({"spark.master": master} if master else {}),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory or default_driver_memory(master),
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


def make_session(master: str | None = "local[*]", app_name: str = "skype-dskype", driver_memory: str | None = None,
                 extra: dict[str, str] | None = None):
    """One SparkSession for a run; executors use this interpreter unless told otherwise."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in {**session_conf(master, driver_memory), **(extra or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def executor_cores(spark) -> int | None:
    """Cores of one executor: ``spark.executor.cores`` if set, N of ``local[N]``, else None."""
    conf = spark.sparkContext.getConf()
    cores = conf.get("spark.executor.cores", None)
    if cores:
        return max(1, int(cores))
    master = conf.get("spark.master", "")
    if master.startswith("local[") and master[6:-1].split(",")[0].isdigit():
        return max(1, int(master[6:-1].split(",")[0]))
    if master in ("local", "local[1]"):
        return 1
    return None


# Settings a run takes unless the user gave their own.  The checkpoint's offsets, commits and
# state changelogs are written through Hadoop's FileSystem API rather than FileContext: on the
# local or shared POSIX file system a run directory lives on (docs/spark-design.md), rename is
# atomic under both, and FileContext's calls were a large part of every micro-batch's fixed cost
# (docs/results-spark.md, "The fixed cost of a batch at P = 1, cut").
DEFAULT_SQL_CONF = {
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}


def configure(spark, plan: Plan) -> None:
    """Session settings a query run needs (the shuffle partitions are frozen at the first run)."""
    if plan.host_slots is None:
        plan.host_slots = executor_cores(spark)
    for key, value in session_conf(None).items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)
    for key, value in DEFAULT_SQL_CONF.items():
        if not spark.conf.get(key, None):
            spark.conf.set(key, value)
    spark.conf.set("spark.sql.shuffle.partitions", str(plan.shuffle_partitions))


# --------------------------------------------------------------------------- memory of a batch

# Heap a subscription command may cost while its batch runs (routing, the transformWithState state
# server, the partition's command log): 200,000 commands in one batch exhausted a 1 GB heap
# (tweets, prefix, P = 2: at most about 5 KB each), and batches of 65,536 (a quarter of 1 GB at
# 4 KB) ran to the end (docs/results-spark.md).  A batch may spend COMMANDS_SHARE of the heap.
BYTES_PER_COMMAND = 4096
COMMANDS_SHARE = 0.25
MIN_COMMANDS_PER_BATCH = 1000


def memory_bytes(text: str) -> int:
    """A JVM memory setting (``"1g"``, ``"512m"``, ``"1536"`` MiB) in bytes.

    >>> memory_bytes("1g"), memory_bytes("512m"), memory_bytes("2048")
    (1073741824, 536870912, 2147483648)
    """
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    value = text.strip().lower().removesuffix("b")
    if value and value[-1] in units:
        return int(float(value[:-1]) * units[value[-1]])
    return int(float(value) * units["m"])


def batch_heap(spark) -> tuple[str, int]:
    """The JVM memory setting a batch's state traffic lives in, and its bytes: the driver's in
    local mode (the executors run inside it), else the executors'."""
    conf = spark.sparkContext.getConf()
    key = "spark.driver.memory" if conf.get("spark.master", "").startswith("local") else "spark.executor.memory"
    text = conf.get(key, "1g")
    return key, memory_bytes(text)


def commands_cap(spark, settings: RunSettings) -> int | None:
    """Subscription commands per micro-batch, at most (None: no cap): ``--commands-per-batch``,
    else ``COMMANDS_SHARE`` of the batch's heap over ``BYTES_PER_COMMAND``.  E130 when that heap
    holds fewer than ``MIN_COMMANDS_PER_BATCH`` commands."""
    if settings.control.commands_per_batch is not None:
        return settings.control.commands_per_batch or None
    key, heap = batch_heap(spark)
    cap = int(heap * COMMANDS_SHARE / BYTES_PER_COMMAND)
    if cap < MIN_COMMANDS_PER_BATCH:
        need = int(MIN_COMMANDS_PER_BATCH * BYTES_PER_COMMAND / COMMANDS_SHARE)
        raise InputError("E130", setting=key, value=conf_text(spark, key), commands=cap,
                         advice=f"set {key} to at least {-(-need // (1 << 20))}m (--driver-memory), "
                                "or --commands-per-batch")
    return cap


def conf_text(spark, key: str) -> str:
    return spark.sparkContext.getConf().get(key, "1g")
