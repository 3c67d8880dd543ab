"""Text: tokenizer, stopwords, the global term order, and tf-idf weights.

Term ids *are* the global order of the paper (keyword lists sorted by increasing document
frequency, rarest first): a :class:`Vocabulary` built from a sample numbers its terms by df
ascending, ties broken by the term string.  Every term vector in the engines is sorted by id.

Terms unseen when the vocabulary was built get the next free id when they are first seen:
they sort *after* every known term, in order of first appearance, and take the largest idf
(df = 0).  Ids never change once given, so an index built over them never has to be rebuilt;
the cost is only that such a term is not in the rare-first position prefix filtering likes.

Weights: ``tf * idf`` with the smooth idf ``ln((1 + D) / (1 + df)) + 1`` (D = documents in the
sample), then L2-normalised.  Explicit ``{term: weight}`` input bypasses tokenization and tf-idf:
its weights are used as given (they must be finite and > 0), then L2-normalised.

Normalisation: text and explicit terms alike are put in Unicode NFC and casefolded
(:func:`normalize_term`), so ``"cafe\u0301"`` (NFD), ``"café"`` and ``"CAFÉ"`` are one term.
Explicit terms that normalise to the same term are merged (their weights add up).  A record
holds at most ``MAX_TERMS`` distinct terms (E030).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping, Self, Sequence

import numpy as np

from skype.errors import InputError
from skype.model import TermMatrix

# English function words (a conventional list; no content words).
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each few for from further had hadn't has hasn't have haven't having he
    he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if
    in into is isn't it it's its itself just let's me more most mustn't my myself no nor not now of
    off on once only or other ought our ours ourselves out over own same shan't she she'd she'll
    she's should shouldn't so some such than that that's the their theirs them themselves then
    there there's these they they'd they'll they're they've this those through to too under until
    up very was wasn't we we'd we'll we're we've were weren't what what's when when's where where's
    which while who who's whom why why's will with won't would wouldn't you you'd you'll you're
    you've your yours yourself yourselves s t d ll m o re ve y also get got just like really
    """.split()
)

_WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 1000  # distinct terms per record (subscription or message)


def normalize_term(term: str) -> str:
    """NFC, then casefold (then NFC again: casefolding can denormalise).

    >>> normalize_term("CAFE\u0301") == normalize_term("café") == "café"
    True
    """
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", term).casefold())


def tokenize(text: str) -> list[str]:
    """Normalise (NFC, casefold), split into Unicode words, drop stopwords.

    >>> tokenize("The Coffee-shop at Rue de Rivoli, Paris!")
    ['coffee', 'shop', 'rue', 'de', 'rivoli', 'paris']
    """
    return [w for w in _WORD.findall(normalize_term(text)) if w not in STOPWORDS]


def smooth_idf(df: np.ndarray, num_docs: int) -> np.ndarray:
    return np.log((1.0 + num_docs) / (1.0 + np.asarray(df, dtype=np.float64))) + 1.0


class Vocabulary:
    """Maps terms to integer ids in the global (df-ascending) order and weights term vectors.

    >>> vocab = Vocabulary.build([["coffee", "paris"], ["paris", "metro"], ["paris"]])
    >>> [vocab.term(i) for i in range(len(vocab))]
    ['coffee', 'metro', 'paris']
    >>> ids, w = vocab.vectorize_text("Paris coffee")
    >>> ids.tolist(), round(float(w @ w), 12)
    ([0, 2], 1.0)
    """

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._terms: list[str] = []
        self._df: list[int] = []
        self.num_docs = 0
        self.num_known = 0  # ids below this were ordered by df at build time

    # ------------------------------------------------------------------ building
    @classmethod
    def from_document_frequencies(cls, df: Mapping[str, int], num_docs: int) -> Self:
        vocab = cls()
        vocab.num_docs = int(num_docs)
        for term, count in sorted(df.items(), key=lambda kv: (kv[1], kv[0])):
            vocab._ids[term] = len(vocab._terms)
            vocab._terms.append(term)
            vocab._df.append(int(count))
        vocab.num_known = len(vocab._terms)
        return vocab

    @classmethod
    def from_table(cls, terms: Sequence[str], df: Sequence[int], num_docs: int) -> Self:
        """The vocabulary whose term ``i`` is ``terms[i]``, of document frequency ``df[i]``, every
        term known (the table of a saved vocabulary, as :meth:`table` gives it)."""
        vocab = cls()
        vocab.num_docs = int(num_docs)
        vocab._terms = list(terms)
        vocab._df = [int(x) for x in df]
        vocab._ids = {t: i for i, t in enumerate(vocab._terms)}
        vocab.num_known = len(vocab._terms)
        return vocab

    def table(self) -> tuple[list[str], list[int]]:
        """The terms in id order and their document frequencies (the lists the vocabulary holds:
        read them, do not change them)."""
        return self._terms, self._df

    @classmethod
    def build(cls, documents: Iterable[Iterable[str]]) -> Vocabulary:
        """Build from token lists (document frequency = number of documents holding a term)."""
        df: Counter[str] = Counter()
        n = 0
        for doc in documents:
            df.update(set(doc))
            n += 1
        return cls.from_document_frequencies(df, n)

    # ------------------------------------------------------------------ lookup
    def __len__(self) -> int:
        return len(self._terms)

    def __contains__(self, term: str) -> bool:
        return term in self._ids

    def term(self, term_id: int) -> str:
        return self._terms[term_id]

    def get(self, term: str) -> int | None:
        return self._ids.get(term)

    def id(self, term: str) -> int:
        """The id of ``term``, giving unseen terms the next free id (see module docstring)."""
        tid = self._ids.get(term)
        if tid is None:
            tid = len(self._terms)
            self._ids[term] = tid
            self._terms.append(term)
            self._df.append(0)
        return tid

    def forget_from(self, size: int) -> None:
        """Forget the terms with ids >= ``size`` (added since ``len(vocab)`` was ``size``): a
        writer that rejects a record undoes the terms the record brought."""
        if isinstance(size, bool) or not isinstance(size, int) or not self.num_known <= size <= len(self._terms):
            raise InputError("E023", what="size", expected=f"an integer in [{self.num_known}, {len(self._terms)}]",
                             value=size)
        for term in self._terms[size:]:
            del self._ids[term]
        del self._terms[size:]
        del self._df[size:]

    def ids(self, terms: Iterable[str]) -> np.ndarray:
        return np.fromiter((self.id(t) for t in terms), dtype=np.int64)

    def document_frequency(self, term_ids: np.ndarray) -> np.ndarray:
        return np.asarray(self._df, dtype=np.int64)[np.asarray(term_ids, dtype=np.int64)]

    def idf(self, term_ids: np.ndarray) -> np.ndarray:
        return smooth_idf(self.document_frequency(term_ids), self.num_docs)

    # ------------------------------------------------------------------ weighting
    def vectorize_tokens(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """tf-idf vector of a token list: (ascending ids, unit weights).  Empty if no tokens."""
        if not tokens:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        counts = Counter(self.id(t) for t in tokens)
        ids = np.fromiter(sorted(counts), dtype=np.int64, count=len(counts))
        tf = np.fromiter((counts[i] for i in ids), dtype=np.float64, count=len(ids))
        return ids, normalize(tf * self.idf(ids))

    def vectorize_text(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize and weight ``text``; raises :class:`InputError` E005 if no term remains."""
        tokens = tokenize(text)
        if len(set(tokens)) > MAX_TERMS:
            raise InputError("E030", n=len(set(tokens)), limit=MAX_TERMS)
        ids, weights = self.vectorize_tokens(tokens)
        if len(ids) == 0:
            raise InputError("E005", text=_clip(text))
        return ids, weights

    def vectorize_terms(self, terms: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """Explicit ``{term: weight}``: terms normalised as text is (NFC, casefold; duplicates
        merged by adding their weights), weights as given (finite, > 0), then L2-normalised."""
        if not isinstance(terms, Mapping) or len(terms) == 0:
            raise InputError("E027", detail=f"expected a non-empty {{term: weight}} object, got {terms!r}")
        if len(terms) > MAX_TERMS:
            raise InputError("E030", n=len(terms), limit=MAX_TERMS)
        merged: dict[int, float] = {}
        for term, weight in terms.items():
            if not isinstance(term, str) or term == "":
                raise InputError("E027", detail=f"term {term!r} is not a non-empty string")
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise InputError("E006", term=term, weight=weight)
            w = float(weight)
            if not math.isfinite(w) or w <= 0.0:
                raise InputError("E006", term=term, weight=weight)
            tid = self.id(normalize_term(term))
            merged[tid] = merged.get(tid, 0.0) + w
        pairs = sorted(merged.items())
        ids = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs))
        weights = np.fromiter((p[1] for p in pairs), dtype=np.float64, count=len(pairs))
        return ids, normalize(weights)

    def vectorize_token_lists(self, docs: Sequence[Sequence[str]]) -> TermMatrix:
        """tf-idf vectors of many token lists at once (CSR).  Rows may be empty."""
        lens = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        flat = self.ids(t for d in docs for t in d)
        rows = np.repeat(np.arange(len(docs), dtype=np.int64), lens)
        return self.weigh_term_ids(rows, flat, len(docs))

    def id_space(self) -> int:
        """Every term id of this vocabulary is below this."""
        return max(len(self), 1)

    def weigh_term_ids(self, rows: np.ndarray, term_ids: np.ndarray, num_rows: int) -> TermMatrix:
        """tf-idf CSR from (row, term id) occurrences (duplicates count as tf)."""
        size = self.id_space()
        key = np.asarray(rows, np.int64) * size + np.asarray(term_ids, np.int64)
        uniq, tf = np.unique(key, return_counts=True)
        urows, uids = np.divmod(uniq, size)
        weights = tf * self.idf(uids)
        return TermMatrix(_indptr(urows, num_rows), uids, normalize_rows(urows, weights, num_rows))

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        return {"num_docs": self.num_docs, "num_known": self.num_known, "terms": self._terms, "df": self._df}

    @classmethod
    def from_dict(cls, data: Mapping) -> Vocabulary:
        vocab = cls()
        vocab.num_docs = int(data["num_docs"])
        vocab.num_known = int(data["num_known"])
        vocab._terms = list(data["terms"])
        vocab._df = [int(x) for x in data["df"]]
        vocab._ids = {t: i for i, t in enumerate(vocab._terms)}
        return vocab

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def copy(self) -> Vocabulary:
        return Vocabulary.from_dict(self.to_dict())


def normalize(weights: np.ndarray) -> np.ndarray:
    """Scale a weight vector to unit L2 length.

    The same arithmetic as :func:`normalize_rows` with one row, so that a record's weights are bit
    for bit the same on every path (one record, a columnar batch, the service, Spark) and on every
    CPU: never a BLAS dot, whose summation order depends on the kernel the CPU selects.
    """
    weights = np.asarray(weights, dtype=np.float64)
    return normalize_rows(np.zeros(len(weights), dtype=np.intp), weights, 1)


def normalize_rows(rows: np.ndarray, weights: np.ndarray, num_rows: int) -> np.ndarray:
    """Scale each row's weights to unit L2 length; ``rows[i]`` is the row of ``weights[i]``.

    The squares are summed in one fixed order, the order of ``weights`` (``np.bincount`` adds
    sequentially from 0.0), then each row is divided by the correctly rounded square root: IEEE
    arithmetic with no reassociation, so the result does not depend on the CPU or its BLAS.
    """
    sq = np.bincount(rows, weights=weights * weights, minlength=num_rows)
    norms = np.sqrt(sq)
    return weights / norms[rows]


def _indptr(rows: np.ndarray, num_rows: int) -> np.ndarray:
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_rows), out=indptr[1:])
    return indptr


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
