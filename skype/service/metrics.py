"""The service's Prometheus metrics (``GET /metrics``), in a registry of their own.

Names: ``skype_requests_total{route,status}``, ``skype_messages_total``,
``skype_subscriptions``, ``skype_events_pushed_total``, ``skype_stream_writes_total`` and
``skype_blocks_delivered_total`` (the fan-out's work: events per write, writes per block),
``skype_connected_clients``,
``skype_queue_depth``, ``skype_publish_request_to_write_seconds`` (histogram, one count per
event and connection: from the arrival of the publish request whose write made the event (its
headers parsed, before its body is read) to the ``transport.write`` of the event's bytes on that
connection), ``skype_log_bytes`` (written
since start), ``skype_fsync_seconds`` (histogram), ``skype_snapshot_age_seconds``,
``skype_recovery_seconds``, ``skype_slow_consumers_total`` (streams cut because they fell
behind), ``skype_stream_resets_total{reason}`` (subscriptions resumed with a reset: ``evicted``,
``restart``, ``ahead``, ``backlog``) and the stream lag: ``skype_stream_buffered_bytes`` (bytes
written to streams and not yet taken by the kernel, all streams) and ``skype_stream_lag_bytes``
(the largest of one stream), set every second.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
PUSH_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0,
                2.0, 5.0)


class CountingHistogram:
    """A histogram that takes ``observe(value, n)``: n observations of one value at the cost of
    one (the events of one block written to one connection share their latency)."""

    def __init__(self, name: str, doc: str, buckets: tuple[float, ...], registry: CollectorRegistry) -> None:
        self.name, self.doc, self.buckets = name, doc, buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        registry.register(self)

    def observe(self, value: float, n: int = 1) -> None:
        i = 0
        buckets = self.buckets
        while i < len(buckets) and value > buckets[i]:
            i += 1
        self.counts[i] += n
        self.sum += value * n

    def collect(self):
        cumulative, acc = [], 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts):
            acc += count
            cumulative.append((str(bound) if bound != float("inf") else "+Inf", acc))
        family = HistogramMetricFamily(self.name, self.doc)
        family.add_metric([], cumulative, self.sum)
        return [family]


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("skype_requests", "HTTP requests", ["route", "status"], registry=r)
        self.messages = Counter("skype_messages", "messages accepted", registry=r)
        self.subscriptions = Gauge("skype_subscriptions", "subscriptions registered", registry=r)
        self.events_pushed = Counter("skype_events_pushed", "events written to streams", registry=r)
        self.stream_writes = Counter("skype_stream_writes", "writes to streams (one per stream per block)",
                                     registry=r)
        self.blocks_delivered = Counter("skype_blocks_delivered", "event blocks with a followed event fanned out",
                                        registry=r)
        self.clients = Gauge("skype_connected_clients", "open event streams (SSE and WebSocket)", registry=r)
        self.queue_depth = Gauge("skype_queue_depth", "jobs waiting for the engine thread", registry=r)
        self.publish_to_write = CountingHistogram(
            "skype_publish_request_to_write_seconds",
            "publish request arrival to the write of the event's bytes (one count per event and stream)",
            PUSH_BUCKETS, r)
        self.log_bytes = Gauge("skype_log_bytes", "bytes written to the log since start", registry=r)
        self.fsync_seconds = Histogram("skype_fsync_seconds", "fsync of the log", buckets=LATENCY_BUCKETS,
                                       registry=r)
        self.snapshot_time = Gauge("skype_snapshot_timestamp_seconds", "when the last snapshot was written",
                                   registry=r)
        self.snapshot_time.set(time.time())
        age = Gauge("skype_snapshot_age_seconds", "seconds since the last snapshot", registry=r)
        age.set_function(lambda: time.time() - self.snapshot_time._value.get())
        self.recovery_seconds = Gauge("skype_recovery_seconds", "time the last startup took to recover",
                                      registry=r)
        self.slow_consumers = Counter("skype_slow_consumers", "streams cut for falling behind", registry=r)
        self.resets = Counter("skype_stream_resets", "subscriptions resumed with a reset, by reason", ["reason"],
                              registry=r)
        self.stream_buffered_bytes = Gauge("skype_stream_buffered_bytes",
                                           "bytes written to streams not yet sent, all streams", registry=r)
        self.stream_lag_bytes = Gauge("skype_stream_lag_bytes", "bytes written not yet sent, the largest of a stream",
                                      registry=r)
