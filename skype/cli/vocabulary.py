"""``python -m skype.run vocabulary``: build the term vocabulary of a stream from a sample.

Reads the first ``--sample`` messages of a messages file, an events file or a generated dataset
(streaming: only the sample is held), counts each term's document frequency, and writes a
vocabulary file (:mod:`skype.dskype.vocabulary`): the known terms in the global df-ascending order,
the sample size (for the idf), and the key and slots that give unseen terms their hashed ids.
``distributed --vocabulary FILE`` ships it to the executors, which then read and tokenize the raw
streams themselves; ``simulate --vocabulary FILE`` weighs with the same file, so both engines give
identical scores.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Iterator

from skype.report import print_table
from skype.errors import InputError
from skype.dskype.records import document_tokens


def message_documents(path: str, events: bool = False) -> Iterator[list[str]]:
    """The token list of every message of a public-format file, in stream order (lazily).  Records
    that are not messages (events other than ``msg``) are passed over; a message with neither text
    nor a terms object counts as an empty document."""
    from skype import io

    for line, obj in io.iter_objects(path):
        if not isinstance(obj, dict):
            raise InputError("E033", kind="message", value=obj, source=path, line=line)
        if events and obj.get("op") != "msg":
            continue
        yield document_tokens(obj)


def covered_terms(paths: list[str]) -> Iterator[str]:
    """Every term of every record (messages, subscriptions, events) of the files, streamed."""
    from skype import io

    for path in paths:
        for _, obj in io.iter_objects(path):
            yield from document_tokens(obj)


def dataset_documents(args: argparse.Namespace) -> Iterator[list[str]]:
    from skype.data import make_workload

    w = make_workload(args.dataset, num_subs=0, num_messages=args.sample, seed=args.seed)
    for i in range(len(w.messages)):
        ids, _ = w.messages.terms.row(i)
        yield [w.vocabulary.term(int(t)) for t in ids]


def cmd_vocabulary(args: argparse.Namespace) -> int:
    from skype.dskype.vocabulary import FrozenVocabulary

    if args.sample < 1:
        raise InputError("E023", what="--sample", expected="an integer >= 1", value=args.sample)
    if args.messages and args.events:
        raise InputError("E023", what="--messages", expected="left out when --events is given", value=args.messages)
    if args.messages or args.events:
        docs = message_documents(args.messages or args.events, events=bool(args.events))
        source = args.messages or args.events
    else:
        docs = dataset_documents(args)
        source = f"{args.dataset} (seed {args.seed})"
    key = bytes.fromhex(args.key) if args.key else None
    vocab = FrozenVocabulary.from_sample(itertools.islice(docs, args.sample), slots=args.slots, key=key,
                                         cover=covered_terms(args.cover))
    vocab.save(args.out)
    print_table("vocabulary", [("sample", f"{vocab.num_docs} messages of {source}"),
                               ("known terms", f"{vocab.num_known:,} ({len(args.cover)} files covered)"),
                               ("unseen-term slots", f"{vocab.slots:,} (ids {vocab.num_known:,} .. "
                                                     f"{vocab.id_limit - 1:,})"),
                               ("written", args.out)], file=sys.stdout)
    return 0


def _hex_key(text: str) -> str:
    try:
        if len(bytes.fromhex(text)) >= 8:
            return text
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected at least 8 bytes in hex, got {text!r}")


def register(sub: argparse._SubParsersAction) -> None:
    from skype.data.workloads import DATASETS
    from skype.dskype.vocabulary import DEFAULT_SLOTS

    p = sub.add_parser("vocabulary", help="build a stream's term vocabulary from a sample (for distributed ingestion)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("sample (one of)")
    src.add_argument("--messages", metavar="FILE", help="messages file (JSONL or Parquet, public format)")
    src.add_argument("--events", metavar="FILE", help="events file: its msg records")
    src.add_argument("--dataset", choices=DATASETS, default="geonames",
                     help="generated dataset, when no file is given (default: %(default)s)")
    src.add_argument("--seed", type=int, default=0, help="seed of the generated dataset (default: %(default)s)")
    p.add_argument("--sample", type=int, default=10_000, help="first messages counted (default: %(default)s)")
    p.add_argument("--slots", type=int, default=DEFAULT_SLOTS,
                   help="hashed ids for unseen terms; bounds the engines' per-term tables (default: %(default)s)")
    p.add_argument("--cover", action="append", default=[], metavar="FILE",
                   help="make every term of this file known (df 0: weighted as unseen, never hashed); repeatable")
    p.add_argument("--key", type=_hex_key, help="hash key for unseen terms, hex (default: derived from the sample)")
    p.add_argument("--out", required=True, metavar="FILE", help="vocabulary file to write (JSON)")
    p.set_defaults(func=cmd_vocabulary)
