"""Skype: top-k spatial-keyword publish/subscribe over a sliding window.

>>> from skype import ReferenceEngine, Subscription, Message
>>> engine = ReferenceEngine(window=1000)
>>> engine.subscribe(Subscription(id=1, x=2.35, y=48.86, k=2, alpha=0.5, text="coffee"))
[]
>>> engine.publish(Message(id=1, x=2.34, y=48.85, text="great coffee near the louvre"))
[ResultChange(sub_id=1, entered=(1,), left=())]

:class:`Engine` (the Cython core) and :class:`ReferenceEngine` (brute force, the oracle) share
one contract (:class:`skype.api.EngineBase`): ``subscribe`` one record, ``subscribe_batch``
many, ``publish`` / ``publish_batch``, ``advance``, the result readers.  An ``Engine`` is built
from an :class:`EngineOptions` (or a mapping of its fields, or the same fields as keywords).

One library entry point per action (the command line, ``python -m skype.run``, only parses
options into them):

- ``simulate``: :func:`skype.simulate.run` (one engine over a stream, inputs to outputs; its
  settings in four groups, built by :meth:`skype.simulate.SimulateSettings.from_options`);
- ``distributed``: :func:`skype.spark.run` (settings and a workload) or
  :func:`skype.spark.job.run_options` (one mapping of options);
- ``experiments``: :mod:`skype.experiments.runner`;
- ``vocabulary``: :mod:`skype.dskype.vocabulary`.

``skype.simulate`` is loaded on first use (``import skype`` stays light).
"""

__version__ = "0.1.0"

from skype.errors import InputError, SkypeError
from skype.model import (
    DEFAULT_BOUNDS,
    Bounds,
    ChangeLog,
    Match,
    Message,
    MessageBatch,
    ResultChange,
    Subscription,
    SubscriptionBatch,
    TermMatrix,
)
from skype.text import Vocabulary, tokenize
from skype.engine_settings import EngineOptions
from skype.reference import ReferenceEngine
from skype.engine import Engine

__all__ = [
    "DEFAULT_BOUNDS", "Bounds", "ChangeLog", "Engine", "EngineOptions", "InputError", "Match", "Message", "MessageBatch",
    "ReferenceEngine", "ResultChange", "SkypeError", "Subscription", "SubscriptionBatch", "TermMatrix",
    "Vocabulary", "simulate", "tokenize", "__version__",
]


def __getattr__(name: str):
    if name == "simulate":  # the run driver, loaded on first use
        import importlib

        return importlib.import_module("skype.simulate")
    raise AttributeError(f"module 'skype' has no attribute {name!r}")
