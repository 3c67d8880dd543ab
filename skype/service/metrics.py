"""The service's Prometheus metrics (``GET /metrics``), in a registry of their own.

Names: ``skype_requests_total{route,status}``, ``skype_messages_total``,
``skype_subscriptions``, ``skype_events_pushed_total``, ``skype_connected_clients``,
``skype_queue_depth``, ``skype_publish_to_push_seconds`` (histogram: request received to event
written to a stream), ``skype_log_bytes`` (written since start), ``skype_fsync_seconds``
(histogram), ``skype_snapshot_age_seconds``, ``skype_recovery_seconds`` and
``skype_slow_consumers_total`` (streams closed because they fell behind).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("skype_requests", "HTTP requests", ["route", "status"], registry=r)
        self.messages = Counter("skype_messages", "messages accepted", registry=r)
        self.subscriptions = Gauge("skype_subscriptions", "subscriptions registered", registry=r)
        self.events_pushed = Counter("skype_events_pushed", "events written to streams", registry=r)
        self.clients = Gauge("skype_connected_clients", "open event streams (SSE and WebSocket)", registry=r)
        self.queue_depth = Gauge("skype_queue_depth", "jobs waiting for the engine thread", registry=r)
        self.push_latency = Histogram("skype_publish_to_push_seconds", "request received to event pushed",
                                      buckets=LATENCY_BUCKETS, registry=r)
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
        self.slow_consumers = Counter("skype_slow_consumers", "streams closed for falling behind", registry=r)
