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
