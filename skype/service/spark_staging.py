"""The staged stream of ``serve --engine spark``: the service's logged writes as DSkype stream files.

The vectorised messages or subscription commands of log records ``i..j`` become the stream file
``part-<i>-<j>.parquet`` of ``DIR/spark/in/messages`` or ``in/commands``
(:mod:`skype.dskype.staging`'s format; commands carry ``at``, the messages before them), written
atomically, grouped (:class:`StreamWriter`).  Names follow the log, so the stream's order is the
log's, and a restart that replays the log stages only the records no file holds yet (per
directory, the largest ``j``).  A snapshot query is a command file of its own,
``part-<j>-<j>.q<n>.parquet`` after record ``j`` (:mod:`skype.service.spark_queries`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from skype.dskype.staging import command_table, message_table, write_table
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix

def _id_rows(ids: list[int]) -> SubscriptionBatch:
    """Unsubscribe rows: ids only (they reach every partition)."""
    n = len(ids)
    z = np.zeros(n)
    return SubscriptionBatch(np.array(ids, np.int64), z, z, np.zeros(n, np.int64), z,
                             TermMatrix(np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.zeros(0)))


class StreamWriter:
    """Stages the logged writes as stream files (module docstring, 1), grouped: the writes of log
    records ``i..j`` go to ``part-<i>-<j>.parquet`` of each directory they touch, written when
    :meth:`flush` is called (by a timer, at a size, and before every snapshot: the log replays
    what a snapshot does not cover, so whatever the newest snapshot covers must be staged).
    Per directory, the last record staged (the largest ``j``) tells a restart which records to
    stage again: a replayed record at or below it is not.  Commands are written before the
    messages of one flush, so every command is staged no later than the messages after it.
    Used on the engine thread only."""

    FLUSH_RECORDS = 256      # log records pending before a flush without waiting for the timer
    FLUSH_MESSAGES = 20_000

    def __init__(self, run_dir: Path) -> None:
        self.messages_dir = run_dir / "in" / "messages"
        self.commands_dir = run_dir / "in" / "commands"
        self.messages_dir.mkdir(parents=True, exist_ok=True)
        self.commands_dir.mkdir(parents=True, exist_ok=True)
        self.index = 0          # the log index of the next write
        self.first: int | None = None  # the log index of the first write pending (None: none)
        self.muted = False      # a snapshot being restored: its writes are staged already
        self.messages: list[MessageBatch] = []
        self.commands: list[tuple[str, int, SubscriptionBatch]] = []
        self.pending_messages = 0
        self.staged = {"messages": _staged_upto(self.messages_dir), "commands": _staged_upto(self.commands_dir)}
        self.staged_messages = self.staged["messages"] > 0
        self.files = 0          # stream files written by this process

    def mark(self) -> tuple:
        return len(self.messages), len(self.commands), self.pending_messages, self.first

    def undo(self, mark: tuple) -> None:
        """Forget what a refused write added."""
        del self.messages[mark[0]:], self.commands[mark[1]:]
        self.pending_messages, self.first = mark[2], mark[3]

    def _pending(self) -> None:
        if self.first is None:
            self.first = self.index

    def message(self, batch: MessageBatch) -> None:
        if not self.muted and self.index >= self.staged["messages"]:
            self._pending()
            self.messages.append(batch)
            self.pending_messages += len(batch)

    def command(self, op: str, at: int, batch: SubscriptionBatch) -> None:
        if not self.muted and self.index >= self.staged["commands"]:
            self._pending()
            self.commands.append((op, at, batch))

    def written(self) -> None:
        """A write was applied (and logged): the next one has the next log index."""
        self.index += 1
        if self.first is not None and (self.index - self.first >= self.FLUSH_RECORDS
                                       or self.pending_messages >= self.FLUSH_MESSAGES):
            self.flush()

    def flush(self) -> None:
        """Stage the pending writes (records ``first .. index - 1``; a record already staged,
        replayed after a restart, is not pending)."""
        if self.first is None:
            return
        name = f"part-{self.first:012d}-{self.index - 1:012d}.parquet"
        if self.commands:
            from skype.partitioning.registry import concat_subscriptions

            ops = [op for op, _, b in self.commands for _ in range(len(b))]
            ats: list[int | None] = [at for _, at, b in self.commands for _ in range(len(b))]
            write_table(command_table(ops, ats, concat_subscriptions([b for _, _, b in self.commands])),
                        self.commands_dir / name, "parquet")
            self.files += 1
        if self.messages:
            write_table(message_table(MessageBatch.concat(self.messages)), self.messages_dir / name, "parquet")
            self.staged_messages = True
            self.files += 1
        self.messages, self.commands, self.pending_messages = [], [], 0
        self.first = None

    def query(self, n: int, at: int, spec: str) -> None:
        """Stage snapshot query ``n`` at position ``at`` (its compiled ``spec``): the pending writes
        first, then its own command file, named after the last log record before it
        (:mod:`skype.service.spark_queries`)."""
        from skype.service.spark_queries import query_file_name

        self.flush()
        write_table(command_table(["query"], [at], _id_rows([n]), spec=[spec]),
                    self.commands_dir / query_file_name(self.index - 1, n), "parquet")
        self.files += 1

    def restored(self, log_index: int) -> None:
        """A snapshot covering the records before ``log_index`` was restored."""
        self.index, self.first = log_index, None


def _staged_upto(directory: Path) -> int:
    """One past the last log record whose writes a directory holds (0: none)."""
    last = -1
    for path in directory.glob("part-*.parquet"):
        parts = path.name.split(".")[0].split("-")  # part-<i>-<j>.parquet, or a query's part-<j>-<j>.q<n>.parquet
        last = max(last, int(parts[-1]))
    return last + 1
