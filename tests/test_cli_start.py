"""``python -m skype.run <subcommand>`` imports that subcommand's module only (issue 34: a
restarting server does not wait for the other subcommands' imports), and the map that says which
module registers which subcommand covers every subcommand of the full parser."""

from __future__ import annotations

import argparse
import ast
import importlib
import subprocess
import sys

from skype.run import COMMANDS, SUBCOMMANDS, build_parser


def _names(parser: argparse.ArgumentParser) -> set[str]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(action.choices)


def test_the_map_names_each_subcommands_module():
    assert _names(build_parser()) == set(COMMANDS)
    assert set(COMMANDS.values()) == set(SUBCOMMANDS)
    for module in SUBCOMMANDS:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        assert set(sub.choices) == {name for name, owner in COMMANDS.items() if owner == module}
    for name in COMMANDS:
        assert _names(build_parser(name)) == {n for n, owner in COMMANDS.items() if owner == COMMANDS[name]}
    assert _names(build_parser("no-such-command")) == set(COMMANDS)  # the full parser names the choices


def test_serve_imports_no_other_subcommand():
    code = ("import sys\nfrom skype.run import main\ntry:\n    main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(n for n in sys.modules if n.startswith('skype.cli.') or n.split('.')[0] == 'scipy'),"
            " file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(out.stderr.strip()))
    assert "skype.cli.serve" in loaded and "scipy" not in loaded
    others = {m for m in SUBCOMMANDS if m not in ("skype.cli.serve", "skype.cli.simulate")}  # serve shares simulate's engine options
    assert not loaded & (others | {"skype.cli.partition_timeline"})
