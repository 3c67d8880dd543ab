"""DSkype on a Spark cluster: the ``distributed`` command as a Spark application.

Usage (the options are those of ``python -m skype.run distributed``, without ``--master``)::

    spark-submit --master spark://HOST:7077 \
        --archives skype-env.tar.gz#env --conf spark.pyspark.python=./env/bin/python \
        skype/cli/spark_submit.py --method prefix --partitions 8 --batch-size 10000 \
        --checkpoint /shared/dskype-run --results-out /shared/results.jsonl

The compiled engine (Cython ``.so`` modules) cannot be imported from a ``--py-files`` zip: ship a
packed virtual environment with the ``skype`` package installed (``venv-pack -o skype-env.tar.gz``)
with ``--archives`` and point ``spark.pyspark.python`` at it (``docs/spark.md``).  The run
directory must be on a file system every node sees (stream files are read by executors).  In
client deploy mode the driver uses the local interpreter (``spark.pyspark.driver.python``).
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    from skype.cli.distributed import add_distributed_args
    from skype.cli.inputs import add_workload_args
    from skype.cli.simulate import add_engine_args

    parser = argparse.ArgumentParser(prog="spark-submit skype/cli/spark_submit.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(parser)
    add_engine_args(parser)
    add_distributed_args(parser, master=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    from skype.errors import SkypeError
    from skype.report import distributed_rows, print_table
    from skype.spark.job import run_options
    from skype.spark.runtime import make_session

    args = build_parser().parse_args(argv)
    spark = make_session(None, app_name="skype-dskype", extra=dict(args.conf))
    try:
        settings, run_dir, out = run_options(vars(args), spark)
        for metrics in out.get("runs", [out]):
            print_table(f"distributed: {metrics['method']}", distributed_rows(metrics, settings, run_dir))
        return 0
    except SkypeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
