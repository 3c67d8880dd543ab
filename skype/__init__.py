"""Skype: top-k spatial-keyword publish/subscribe over a sliding window.

>>> from skype import ReferenceEngine, Subscription, Message
>>> engine = ReferenceEngine(window=1000)
>>> engine.subscribe(Subscription(id=1, x=2.35, y=48.86, k=2, alpha=0.5, text="coffee"))
[]
>>> engine.publish(Message(id=1, x=2.34, y=48.85, text="great coffee near the louvre"))
[ResultChange(sub_id=1, entered=(1,), left=())]
"""

__version__ = "0.1.0"

from skype.errors import InputError, SkypeError
from skype.model import (
    DEFAULT_BOUNDS,
    Bounds,
    Match,
    Message,
    MessageBatch,
    ResultChange,
    Subscription,
    SubscriptionBatch,
    TermMatrix,
)
from skype.text import Vocabulary, tokenize
from skype.api import ChangeLog
from skype.reference import ReferenceEngine
from skype.engine import Engine

__all__ = [
    "DEFAULT_BOUNDS", "Bounds", "ChangeLog", "Engine", "InputError", "Match", "Message", "MessageBatch",
    "ReferenceEngine", "ResultChange", "SkypeError", "Subscription", "SubscriptionBatch", "TermMatrix",
    "Vocabulary", "tokenize", "__version__",
]
