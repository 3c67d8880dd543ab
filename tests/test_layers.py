"""The layers: the DSkype runtime (skype.dskype) runs without pyspark, and skype.spark.run is the
programmatic entry that refuses a bad run before any session starts."""

import subprocess
import sys

import pytest

from skype.errors import InputError


def test_the_runtime_and_the_workload_import_no_pyspark_nor_the_cli():
    code = (
        "import importlib, pkgutil, sys, skype.dskype, skype.workload\n"
        "for m in pkgutil.walk_packages(skype.dskype.__path__, 'skype.dskype.'):\n"
        "    importlib.import_module(m.name)\n"
        "import skype.spark\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] == 'pyspark' or n.startswith('skype.cli'))\n"
        "print(len([n for n in sys.modules if n.startswith('skype.dskype.')]), bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert int(out[0]) >= 20  # every runtime module was imported
    assert out[1].strip() == "[]"


def test_run_refuses_a_policy_on_a_static_method_before_a_session(tmp_path):
    from skype.data import make_workload
    from skype.dskype.plan import RunSettings
    from skype.spark import run
    from skype.workload import Inputs

    w = make_workload("tweets", num_subs=20, num_messages=50, seed=1)
    workload = Inputs(w.vocabulary, w.subscriptions, [("msgs", w.messages)], w.bounds, "tweets")
    settings = RunSettings.from_options({"method": "location", "partitions": 2, "batch_size": 10, "window": 20,
                                         "rebalance": "tornado"}, w.bounds)
    with pytest.raises(InputError, match="E063"):
        run(settings, workload, spark=object(), run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing planned


def test_run_refuses_results_with_a_console_sink(tmp_path):
    from skype.data import make_workload
    from skype.dskype.plan import RunSettings
    from skype.spark import run
    from skype.workload import Inputs

    w = make_workload("tweets", num_subs=20, num_messages=50, seed=1)
    workload = Inputs(w.vocabulary, w.subscriptions, [("msgs", w.messages)], w.bounds, "tweets")
    settings = RunSettings.from_options({"method": "location", "partitions": 2, "batch_size": 10, "window": 20,
                                         "sink": "console"}, w.bounds)
    with pytest.raises(InputError, match="E023"):
        run(settings, workload, spark=object(), run_dir=tmp_path / "run", results_out=str(tmp_path / "r.jsonl"))


def test_the_service_and_its_client_import_neither_the_cli_nor_pyspark():
    code = (
        "import importlib, pkgutil, sys, skype.service, skype.client\n"
        "for m in pkgutil.walk_packages(skype.service.__path__, 'skype.service.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'pyspark' or n.split('.')[:2] == ['skype', 'cli']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_library_drivers_import_no_cli():
    """The run drivers (simulate, experiments, the Spark entry's library half) and the report
    helpers live below the command line: importing them loads no ``skype.cli`` module."""
    code = (
        "import importlib, pkgutil, sys, skype.simulate, skype.report, skype.spark.job, skype.experiments\n"
        "for m in pkgutil.walk_packages(skype.experiments.__path__, 'skype.experiments.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[:2] == ['skype', 'cli']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_runtime_package_lists_every_module():
    """``skype/dskype/__init__.py``'s docstring names each of its modules (the package's map)."""
    import pkgutil

    import skype.dskype

    doc = skype.dskype.__doc__ or ""
    missing = [m.name for m in pkgutil.iter_modules(skype.dskype.__path__)
               if f":mod:`~skype.dskype.{m.name}`" not in doc]
    assert missing == []


# The import cycles left (tests/import_graph.py reads every import, function-level and
# TYPE_CHECKING ones too).  Each is owned by the work that opens it; a cycle may shrink or go,
# never grow or appear: a new tie between two modules that lean on each other fails here.
KNOWN_CYCLES = [
    frozenset({"skype.service.manysubs", "skype.service.state"}),  # a restore's columnar registration
    frozenset({"skype.service.app", "skype.service.bulk"}),  # bulk's handlers are typed by Service
]


def test_no_import_cycle_but_the_known_ones():
    import import_graph

    found = import_graph.cycles()
    grown = [sorted(c) for c in found if not any(c <= known for known in KNOWN_CYCLES)]
    assert grown == []
    # the engine's layers stay open: the API below the kinds, the oracle engine above its kinds
    rooms = {c for c in found if not any("." in n for n in c)}
    assert all(not ({"api", "querykinds"} <= c or {"reference", "reference_queries"} <= c) for c in rooms)


def test_the_import_graph_finds_a_cycle(tmp_path):
    """The reader sees every kind of import: a cycle closed by a function-level import and one
    closed under TYPE_CHECKING are both found; a one-way pair is not a cycle."""
    import import_graph

    pkg = tmp_path / "skype"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from skype.a import x\n")
    (pkg / "a.py").write_text("x = 1\ndef f():\n    from skype import b\n")
    (pkg / "b.py").write_text("from skype.a import x\n")
    (pkg / "c.py").write_text("from skype.a import x\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "p.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from skype.sub.q import Q\n")
    (pkg / "sub" / "q.py").write_text("from . import p\nclass Q: ...\n")
    assert sorted(sorted(c) for c in import_graph.cycles(pkg)) == [["a", "b"], ["skype.sub.p", "skype.sub.q"]]
