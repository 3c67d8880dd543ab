"""Command line: ``python -m skype.run <subcommand> [options]``.

Subcommands:
  simulate        run the engine over a workload (the main job; runs on an embedded default)
  generate        write a generated workload to JSONL or Parquet files
  experiments     reproduce the paper's centralized experiments (figures + Markdown report)
  partition-sim   route a workload through a distribution method (no engine, no Spark)
  distributed     run DSkype on Apache Spark (needs the ``spark`` extra)
  vocabulary      build a stream's term vocabulary from a sample (for ``distributed --vocabulary``)
  serve           run the engine as a live HTTP service (needs the ``serve`` extra's packages)
  wal             check or repair a live service's write-ahead log (``wal check|repair DIR``)

``python -m skype.run <subcommand> --help`` documents each one.
"""

from __future__ import annotations

import argparse
import sys

from skype.errors import SkypeError

SUBCOMMANDS = ("skype.cli.simulate", "skype.cli.experiments", "skype.cli.partition_sim", "skype.cli.distributed",
               "skype.cli.vocabulary", "skype.cli.serve", "skype.cli.wal")
# the module that registers each subcommand: a command line that names one imports that module
# only (a restarting server does not wait for the others' imports: scipy, the experiments)
COMMANDS = {"simulate": "skype.cli.simulate", "generate": "skype.cli.simulate", "experiments": "skype.cli.experiments",
            "partition-sim": "skype.cli.partition_sim", "distributed": "skype.cli.distributed",
            "vocabulary": "skype.cli.vocabulary", "serve": "skype.cli.serve", "wal": "skype.cli.wal"}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or only of ``command``'s module when it names one."""
    import importlib

    parser = argparse.ArgumentParser(prog="python -m skype.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="<subcommand>")
    for name in (COMMANDS[command],) if command in COMMANDS else SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # subcommand not part of this build
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(words)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SkypeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
