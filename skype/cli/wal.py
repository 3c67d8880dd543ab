"""``python -m skype.run wal check|repair DIR``: the operator's command for a service log.

``DIR`` is a ``serve --data-dir`` (or its ``log`` folder); run it with the server stopped.
``check`` prints what a repair would drop (segment, byte offset, bytes and whole records lost,
their message and subscription ids, the position the repaired log ends at) and changes nothing;
exit status 0 when the log is clean, 1 when a repair would drop something.  ``repair`` drops it,
moving the bytes aside into ``.corrupt`` files beside the segments.  The work is
:mod:`skype.service.walcheck`'s; this module only parses arguments.
"""

from __future__ import annotations

import argparse
import json


def cmd_wal(args: argparse.Namespace) -> int:
    from skype.service import walcheck

    report = walcheck.repair(args.dir) if args.action == "repair" else walcheck.check(args.dir)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.describe())
    return 0 if args.action == "repair" or report.clean else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("wal", help="check or repair a live service's write-ahead log",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("check", "repair"),
                   help="check: say what a repair would drop, change nothing; repair: drop it (moved aside)")
    p.add_argument("dir", metavar="DIR", help="the server's --data-dir (or its log folder)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_wal)
