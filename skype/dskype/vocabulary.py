"""A vocabulary built once from a sample and shipped to executors (no pyspark here).

Algorithm.  ``python -m skype.run vocabulary`` counts document frequencies over the first N
messages of a stream (the *sample*) and writes a :class:`FrozenVocabulary` file: the known terms
numbered as :class:`skype.text.Vocabulary` numbers them (df ascending, ties by the term string,
ids ``0 .. V-1``), the sample size D, and a 128-bit hash key.  Every executor loads the same file
and weighs text exactly as the centralized engine does (tokenizer, tf * smooth idf, L2 norm).

Unseen terms.  A term the sample has not seen gets the id ``V + blake2b_64(key, term) mod S``
(``S`` = the file's ``slots``): every process computes the same id from the term alone, without
coordination, and its weight uses df = 0 like :meth:`Vocabulary.id` does.  The core keeps dense
per-term tables up to the largest id (term ids are 32-bit), so ``S`` bounds the engines' memory
and is small (default 2^20); two different unseen terms can therefore share an id.  They are
*detected*, never merged silently: each process remembers the unseen term of every id it gave
(:class:`FrozenVocabulary` raises E080 naming both terms), and, across processes and executors,
an optional :class:`TermClaims` registry in the run directory (one file per claimed id, created
atomically) makes the second term's process raise E080 too.  The chance that n distinct unseen
terms collide is about n^2 / 2S: build the vocabulary from a sample that holds the stream's
common terms, or ``--cover`` the files it knows in advance (their terms become known with df 0,
weighted as unseen terms are, with ids of their own), and raise ``--slots`` for streams with many
new terms (each slot costs an engine about 30 bytes once ids reach it).

Invariant: ids of known terms never change, an unseen term's id depends only on (key, S, V,
term), so the centralized engine given the same file (``simulate --vocabulary``) assigns the
same ids in the same order and computes bit-identical weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np

from skype.errors import InputError
from skype.text import Vocabulary

FORMAT = "skype-vocabulary"
VERSION = 1
DEFAULT_SLOTS = 1 << 20
MAX_TERM_ID = (1 << 32) - 1  # the core's term ids are 32-bit


def unseen_term_id(term: str, key: bytes, base: int, slots: int) -> int:
    """The id every process gives the unseen ``term``: ``base + blake2b_64(key, term) mod slots``."""
    digest = hashlib.blake2b(term.encode("utf-8"), key=key, digest_size=8).digest()
    return base + int.from_bytes(digest, "little") % slots


class FrozenVocabulary(Vocabulary):
    """A :class:`Vocabulary` whose unseen terms take hashed ids in ``[V, V + slots)`` (module
    docstring).  ``len()`` is V, the known terms, as the distributions expect (ids ``>= V`` are
    routed by their value)."""

    def __init__(self) -> None:
        super().__init__()
        self.key = b""
        self.slots = DEFAULT_SLOTS
        self._unseen: dict[int, str] = {}  # id -> the unseen term this process gave it
        self.on_unseen: Callable[[int, str], None] | None = None  # e.g. TermClaims.claim

    # ------------------------------------------------------------------ building
    @classmethod
    def from_sample(cls, documents: Iterable[Iterable[str]], *, slots: int = DEFAULT_SLOTS,
                    key: bytes | None = None, cover: Iterable[str] = ()) -> FrozenVocabulary:
        """From token lists (df = documents holding a term); ``cover``: more terms made known with
        df 0 (the weight an unseen term gets, but an id of their own: no collision possible).
        ``key`` defaults to a hash of the known terms and their dfs, so the same input gives the
        same file."""
        df: Counter[str] = Counter()
        n = 0
        for doc in documents:
            df.update(set(doc))
            n += 1
        for term in cover:
            df.setdefault(term, 0)
        vocab = cls.from_document_frequencies(df, n)
        vocab.slots = _check_slots(slots, vocab.num_known, "slots")
        if key is None:
            key = hashlib.blake2b(json.dumps([*vocab.table(), n]).encode("utf-8"), digest_size=16).digest()
        vocab.key = bytes(key)
        return vocab

    # ------------------------------------------------------------------ lookup
    @property
    def id_limit(self) -> int:
        """One past the largest id this vocabulary gives."""
        return self.num_known + self.slots

    def id(self, term: str) -> int:
        tid = self._ids.get(term)
        if tid is not None:
            return tid
        tid = unseen_term_id(term, self.key, self.num_known, self.slots)
        seen = self._unseen.get(tid)
        if seen is None:
            if self.on_unseen is not None:
                self.on_unseen(tid, term)
            self._unseen[tid] = term
        elif seen != term:
            raise collision(seen, term, tid, self)
        return tid

    def term(self, term_id: int) -> str:
        if term_id < self.num_known:
            return self._terms[term_id]
        if term_id in self._unseen:
            return self._unseen[term_id]
        raise KeyError(term_id)

    def document_frequency(self, term_ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(term_ids, dtype=np.int64)
        known = np.asarray(self._df, dtype=np.int64)
        out = np.zeros(len(ids), np.int64)
        inside = ids < self.num_known
        out[inside] = known[ids[inside]]
        return out

    def id_space(self) -> int:
        return self.id_limit

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "num_docs": self.num_docs, "terms": self._terms[:self.num_known],
                "df": self._df[:self.num_known], "unseen": {"slots": self.slots, "key": self.key.hex()}}

    @classmethod
    def from_dict(cls, data: Mapping, path: str = "<dict>") -> FrozenVocabulary:
        if not isinstance(data, Mapping) or data.get("format") != FORMAT or data.get("version") != VERSION:
            raise InputError("E081", path=path, detail=f"not a {FORMAT} file of version {VERSION}")
        try:
            terms, df = list(data["terms"]), [int(x) for x in data["df"]]
            slots, key = int(data["unseen"]["slots"]), bytes.fromhex(data["unseen"]["key"])
            num_docs = int(data["num_docs"])
        except (KeyError, TypeError, ValueError) as err:
            raise InputError("E081", path=path, detail=f"missing or malformed field ({err})") from None
        if len(terms) != len(df) or len(set(terms)) != len(terms) or not all(isinstance(t, str) for t in terms):
            raise InputError("E081", path=path, detail="terms must be distinct strings, one df each")
        if len(key) < 8:
            raise InputError("E081", path=path, detail="the unseen-term key must have at least 8 bytes")
        vocab = cls.from_table(terms, df, num_docs)
        vocab.slots = _check_slots(slots, len(terms), f"slots of {path}")
        vocab.key = key
        return vocab

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name("." + path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict()))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> FrozenVocabulary:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise InputError("E081", path=str(path), detail=str(err)) from None
        return cls.from_dict(data, str(path))

    def copy(self) -> FrozenVocabulary:
        """The file's vocabulary: known terms only, no unseen terms remembered."""
        return FrozenVocabulary.from_dict(self.to_dict())


def collision(first: str, second: str, term_id: int, vocab: FrozenVocabulary) -> InputError:
    return InputError("E080", first=first, second=second, term_id=term_id, key=vocab.key.hex()[:16],
                      slots=vocab.slots)


def _check_slots(slots: object, known: int, what: str) -> int:
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1 or known + slots - 1 > MAX_TERM_ID:
        raise InputError("E023", what=what, expected=f"an integer in [1, {MAX_TERM_ID + 1 - known}]", value=slots)
    return slots


class TermClaims:
    """The run's registry of unseen-term ids, shared by every process through the file system
    (the run directory): the first process to give an id writes ``<dir>/<id // 4096>/<id>`` with
    the term (a hard link of a finished temporary file, which fails if the name exists); a later
    process giving that id to another term finds the file and raises E080."""

    def __init__(self, directory: str | Path, vocab: FrozenVocabulary) -> None:
        self.directory = str(directory)
        self.vocab = vocab

    def claim(self, term_id: int, term: str) -> None:
        folder = os.path.join(self.directory, str(term_id // 4096))
        path = os.path.join(folder, str(term_id))
        data = term.encode("utf-8")
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            # unique to the attempt: process ids collide across executors sharing the directory
            tmp = os.path.join(folder, f".{term_id}.{uuid.uuid4().hex}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(data)
            try:
                os.link(tmp, path)
                return
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        with open(path, "rb") as fh:
            held = fh.read()
        if held != data:
            raise collision(held.decode("utf-8"), term, term_id, self.vocab)


_loaded: dict[tuple[str, str | None], FrozenVocabulary] = {}  # per process: path -> the loaded file


def shipped_vocabulary(path: str, claims_dir: str | None = None) -> FrozenVocabulary:
    """The vocabulary at ``path``, loaded once per process (an executor's Python worker keeps it
    across tasks), claiming unseen ids in ``claims_dir`` if given."""
    key = (path, claims_dir)
    vocab = _loaded.get(key)
    if vocab is None:
        vocab = FrozenVocabulary.load(path)
        if claims_dir is not None:
            vocab.on_unseen = TermClaims(claims_dir, vocab).claim
        _loaded[key] = vocab
    return vocab
