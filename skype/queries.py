"""The query kinds beside the ranked top-k, and snapshot queries (issue 12; ``docs/queries.md``).

Continuous kinds (subscriptions):

* ``range`` (Tornado / PS2Stream CRQ, STS): every window message inside ``rect`` (edges
  included) that satisfies ``match``; newest first.
* ``knn`` (SSTD CKQ): the ``k`` nearest window messages that satisfy ``match``; distance
  ascending, then newest first.
* ``terms`` (SSTD CTQ): the ``k`` terms occurring in the most window messages inside ``rect``,
  with those counts; count descending, then term ascending.

``match`` is ``"any"`` (at least one of the query's terms), ``"all"`` (every term) or a boolean
expression over terms with ``AND``, ``OR`` and parentheses (``AND`` binds tighter).  A query with
no terms has no text predicate.  Every kind may carry ``until``: a timestamp after which the
subscription ends by itself (when the clock passes it; its results then leave).

Snapshot queries (``Engine.query``) are one-shot against the current window: ``range``,
``knn``, ``terms`` and ``topk`` (Skype's score for an ad hoc location, terms, k and alpha), each
with an optional ``last`` (only messages with ``t > now - last`` count).

Records are validated here, once, into a :class:`QuerySpec`: term ids of the engine's
vocabulary and the predicate compiled to a postfix program (term id >= 0 tests that the message
holds the term; :data:`OP_AND`, :data:`OP_OR` combine the two values below them).

>>> from skype import Engine, Message
>>> engine = Engine(window=10, bounds=(0, 0, 10, 10), snapshots=True)
>>> engine.subscribe(RangeSubscription(id=1, rect=(0, 0, 5, 5), match="coffee AND (bagel OR croissant)"))
[]
>>> engine.publish(Message(id=7, x=1, y=1, text="coffee and a croissant"))
[ResultChange(sub_id=1, entered=(7,), left=())]
>>> engine.query("knn", x=0, y=0, k=1, text="coffee")
[Neighbor(id=7, distance=1.4142135623730951)]
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from skype import validate
from skype.errors import InputError
from skype.model import Bounds, Subscription
from skype.text import MAX_TERMS, Vocabulary, normalize_term, tokenize

KINDS = ("topk", "range", "knn", "terms")
OP_AND, OP_OR = -1, -2
MATCH_WORDS = ("any", "all")

# the fields a record of each kind may carry (beside "op", "kind", "id"/"qid")
FIELDS = {
    "topk": ("x", "y", "k", "alpha", "text", "terms", "until", "last"),
    "range": ("rect", "text", "terms", "match", "until", "last"),
    "knn": ("x", "y", "k", "text", "terms", "match", "until", "last"),
    "terms": ("rect", "k", "until", "last"),
}


@dataclass(frozen=True)
class RangeSubscription:
    """Continuous boolean range-keyword query."""

    id: int
    rect: Sequence[float]
    text: str | None = None
    terms: Any = None
    match: str = "any"
    until: float | None = None
    kind: ClassVar[str] = "range"


@dataclass(frozen=True)
class KnnSubscription:
    """Continuous k-nearest-neighbour query with a text predicate."""

    id: int
    x: float
    y: float
    k: int = 10
    text: str | None = None
    terms: Any = None
    match: str = "any"
    until: float | None = None
    kind: ClassVar[str] = "knn"


@dataclass(frozen=True)
class TermsSubscription:
    """Continuous top-k terms of a region."""

    id: int
    rect: Sequence[float]
    k: int = 10
    until: float | None = None
    kind: ClassVar[str] = "terms"


AnySubscription = Subscription | RangeSubscription | KnnSubscription | TermsSubscription


@dataclass(frozen=True, order=True)
class Neighbor:
    """A kNN result entry."""

    id: int
    distance: float


@dataclass(frozen=True)
class TermCount:
    """A top-terms result entry."""

    term: str
    count: int


@dataclass
class QuerySpec:
    """A validated query of any kind beside topk subscriptions (and topk snapshots)."""

    kind: str
    id: int | None = None
    rect: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    x: float = 0.0
    y: float = 0.0
    k: int = 0
    alpha: float = 0.0
    program: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # postfix predicate (empty: none)
    cover: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # a match holds one (empty: any)
    term_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # topk snapshot: tf-idf vector
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    until: float | None = None
    last: float | None = None


# --------------------------------------------------------------------------- boolean expressions

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_expression(expr: str) -> tuple[list, list[str]]:
    """Postfix program over normalised terms (operators "AND", "OR") and the operand terms.

    >>> parse_expression("coffee AND (Bagel OR croissant)")
    (['coffee', 'bagel', 'croissant', 'OR', 'AND'], ['coffee', 'bagel', 'croissant'])
    """
    tokens = _TOKEN.findall(expr)
    pos = 0
    out: list = []
    operands: list[str] = []

    def fail(detail: str):
        raise InputError("E041", expr=expr, detail=detail)

    def atom() -> None:
        nonlocal pos
        if pos >= len(tokens):
            fail("expected a term or '(' at the end")
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            disjunction()
            if pos >= len(tokens) or tokens[pos] != ")":
                fail("missing ')'")
            pos += 1
        elif tok in (")", "AND", "OR"):
            fail(f"expected a term or '(' before {tok!r}")
        else:
            words = tokenize(tok)
            if len(words) != 1 or normalize_term(tok) != words[0]:
                fail(f"operand {tok!r} is not one indexable term (stopword, punctuation or several words)")
            out.append(words[0])
            operands.append(words[0])

    def conjunction() -> None:
        nonlocal pos
        atom()
        while pos < len(tokens) and tokens[pos] == "AND":
            pos += 1
            atom()
            out.append("AND")

    def disjunction() -> None:
        nonlocal pos
        conjunction()
        while pos < len(tokens) and tokens[pos] == "OR":
            pos += 1
            conjunction()
            out.append("OR")

    if not tokens:
        fail("empty expression")
    disjunction()
    if pos != len(tokens):
        fail(f"expected AND, OR or the end, got {tokens[pos]!r}")
    return out, list(dict.fromkeys(operands))


def _cover(program: list) -> list:
    """Terms such that every message satisfying the postfix ``program`` holds one of them: an
    OR needs a cover of each side, an AND the smaller cover of its two sides."""
    stack: list[list] = []
    for op in program:
        if op == OP_OR:
            b, a = stack.pop(), stack.pop()
            stack.append(list(dict.fromkeys(a + b)))
        elif op == OP_AND:
            b, a = stack.pop(), stack.pop()
            stack.append(min(a, b, key=lambda c: (len(c), sorted(c))))
        else:
            stack.append([op])
    return stack[0] if stack else []


def _record_terms(text: Any, terms: Any) -> list[str] | None:
    """The normalised terms of ``text`` or ``terms`` (a list of terms or ``{term: weight}``),
    None when the record has neither."""
    if text is not None and terms is not None:
        raise InputError("E013", got="both")
    if text is not None:
        if not isinstance(text, str):
            raise InputError("E012", field="text", expected="a string", value=text)
        words = list(dict.fromkeys(tokenize(text)))
        if not words:
            raise InputError("E005", text=text[:60])
    elif terms is not None:
        if isinstance(terms, Mapping):
            validate_weights = terms.items()
            for term, w in validate_weights:
                if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w > 0):
                    raise InputError("E006", term=term, weight=w)
            names = list(terms)
        elif isinstance(terms, (list, tuple)):
            names = list(terms)
        else:
            raise InputError("E012", field="terms", expected="a list of terms or an object {term: weight}", value=terms)
        words = []
        for name in names:
            if not isinstance(name, str) or not normalize_term(name).strip():
                raise InputError("E012", field="terms", expected="non-empty strings", value=name)
            words.append(normalize_term(name))
        words = list(dict.fromkeys(words))
        if not words:
            raise InputError("E005", text="")
    else:
        return None
    if len(words) > MAX_TERMS:
        raise InputError("E030", n=len(words), limit=MAX_TERMS)
    return words


def compile_predicate(text: Any, terms: Any, match: Any, vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """(postfix program, cover terms) as term ids of ``vocab``; both empty for no predicate."""
    words = _record_terms(text, terms)
    if not isinstance(match, str):
        raise InputError("E044", value=match)
    if match in MATCH_WORDS:
        if words is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        ids = [vocab.id(w) for w in words]
        program: list = [ids[0]]
        for t in ids[1:]:
            program += [t, OP_OR if match == "any" else OP_AND]
        cover = ids if match == "any" else [min(ids)]  # "all": the rarest term (ids are df-ascending)
        return np.array(program, np.int64), np.array(cover, np.int64)
    if not match.strip():
        raise InputError("E044", value=match)
    postfix, operands = parse_expression(match)
    if words is not None and set(words) != set(operands):
        raise InputError("E045", terms=sorted(words), operands=sorted(operands))
    program = [OP_AND if p == "AND" else OP_OR if p == "OR" else vocab.id(p) for p in postfix]
    if len(operands) > MAX_TERMS:
        raise InputError("E030", n=len(operands), limit=MAX_TERMS)
    return np.array(program, np.int64), np.array(_cover(program), np.int64)


# --------------------------------------------------------------------------- validation


def check_rect(rect: Any) -> tuple[float, float, float, float]:
    if isinstance(rect, (str, bytes)) or not isinstance(rect, Sequence) or len(rect) != 4:
        raise InputError("E042", value=rect)
    vals = []
    for v in rect:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise InputError("E042", value=rect)
        vals.append(float(v))
    if vals[0] > vals[2] or vals[1] > vals[3]:
        raise InputError("E042", value=rect)
    return vals[0], vals[1], vals[2], vals[3]


def check_until(until: Any, clock: float) -> float | None:
    if until is None:
        return None
    if isinstance(until, bool) or not isinstance(until, (int, float, np.integer, np.floating)) \
            or not math.isfinite(until):
        raise InputError("E049", value=until)
    if float(until) < clock:
        raise InputError("E043", until=until, clock=clock)
    return float(until)


def check_last(last: Any) -> float | None:
    if last is None:
        return None
    if isinstance(last, bool) or not isinstance(last, (int, float, np.integer, np.floating)) \
            or not math.isfinite(last) or last <= 0:
        raise InputError("E047", value=last)
    return float(last)


def check_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise InputError("E040", kind=kind, choices=", ".join(KINDS))
    return kind


def compile_query(kind: str, fields: Mapping[str, Any], vocab: Vocabulary, bounds: Bounds, clock: float,
                  *, snapshot: bool) -> QuerySpec:
    """Validate the fields of a ``kind`` query (a subscription, or a snapshot when ``snapshot``)."""
    check_kind(kind)
    allowed = FIELDS[kind]
    for name in fields:
        if name not in allowed or (name == "last" and not snapshot) or (name == "until" and snapshot):
            raise InputError("E046", field=name, kind=kind)
    spec = QuerySpec(kind)
    if kind in ("range", "terms"):
        if "rect" not in fields:
            raise InputError("E011", field="rect")
        spec.rect = check_rect(fields["rect"])
    if kind in ("knn", "topk"):
        for name in ("x", "y"):
            if name not in fields:
                raise InputError("E011", field=name)
        spec.x, spec.y = validate.check_location(fields["x"], fields["y"], bounds)
    if kind in ("knn", "terms", "topk"):
        spec.k = validate.check_k(fields.get("k", 10))
    if kind in ("range", "knn"):
        spec.program, spec.cover = compile_predicate(fields.get("text"), fields.get("terms"),
                                                     fields.get("match", "any"), vocab)
    if kind == "topk":
        spec.alpha = validate.check_alpha(fields.get("alpha", 0.5))
        rec = Subscription(0, spec.x, spec.y, spec.k, spec.alpha, fields.get("text"), fields.get("terms"))
        spec.term_ids, spec.weights = validate.term_vector(rec, vocab)
    spec.until = check_until(fields.get("until"), clock)
    spec.last = check_last(fields.get("last"))
    return spec


def subscription_fields(sub: Any) -> tuple[int, str, dict[str, Any]]:
    """(id, kind, fields) of a subscription object of a kind beside topk."""
    if isinstance(sub, RangeSubscription):
        return sub.id, "range", dict(rect=sub.rect, text=sub.text, terms=sub.terms, match=sub.match, until=sub.until)
    if isinstance(sub, KnnSubscription):
        return sub.id, "knn", dict(x=sub.x, y=sub.y, k=sub.k, text=sub.text, terms=sub.terms, match=sub.match,
                                   until=sub.until)
    if isinstance(sub, TermsSubscription):
        return sub.id, "terms", dict(rect=sub.rect, k=sub.k, until=sub.until)
    raise InputError("E040", kind=type(sub).__name__, choices=", ".join(KINDS))


def compile_subscription(sub: Any, vocab: Vocabulary, bounds: Bounds, clock: float) -> QuerySpec:
    """Validate a range, knn or terms subscription into a :class:`QuerySpec` naming its record."""
    rid = getattr(sub, "id", None)
    try:
        sid, kind, fields = subscription_fields(sub)
        sid = validate.check_id(sid)
        spec = compile_query(kind, {k: v for k, v in fields.items() if v is not None or k == "rect"}, vocab, bounds,
                             clock, snapshot=False)
    except InputError as err:
        raise err.located(record_id=rid) from None
    spec.id = sid
    return spec


def subscription_from_fields(kind: str, obj: Mapping[str, Any]) -> AnySubscription:
    """A subscription object of ``kind`` from a file record (unknown fields rejected)."""
    check_kind(kind)
    for name in obj:
        if name not in ("op", "kind", "id") and (name not in FIELDS[kind] or name == "last"):
            raise InputError("E046", field=name, kind=kind)
    if "id" not in obj:
        raise InputError("E011", field="id")
    get = obj.get
    if kind == "range":
        validate.record_fields(obj, ("rect",), "range subscription")
        return RangeSubscription(obj["id"], obj["rect"], get("text"), get("terms"), get("match", "any"), get("until"))
    if kind == "knn":
        validate.record_fields(obj, ("x", "y"), "knn subscription")
        return KnnSubscription(obj["id"], obj["x"], obj["y"], get("k", 10), get("text"), get("terms"),
                               get("match", "any"), get("until"))
    if kind == "terms":
        validate.record_fields(obj, ("rect",), "terms subscription")
        return TermsSubscription(obj["id"], obj["rect"], get("k", 10), get("until"))
    validate.record_fields(obj, ("x", "y", "k", "alpha"), "subscription")
    terms = get("terms")
    if terms is not None and not isinstance(terms, Mapping):
        raise InputError("E012", field="terms", expected="an object {term: weight}", value=terms)
    return Subscription(id=obj["id"], x=obj["x"], y=obj["y"], k=obj["k"], alpha=obj["alpha"], text=get("text"),
                        terms=dict(terms) if terms is not None else None, until=get("until"))
