"""Build the Cython core: ``csrc/skype/_core/*.pyx`` compiled as ``skype._core.*``.

Generated C++ goes to ``build/cython`` and is never committed.  ``SKYPE_DEBUG=1`` turns on
bounds checks and builds without optimisation for debugging.
"""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("SKYPE_DEBUG") == "1"

CORE_MODULES = ["scoring", "hugepages", "window", "arena", "ranking", "msgindex", "termlists", "subindex", "igptlayout", "igpt", "blocklayout", "blockindex", "conetree", "conecheck", "coneindex", "ciq", "bufstore", "reevaluation", "buffers", "bulk", "flush", "engine", "enginestats",
                "regmasks", "regsearch", "regtree", "rangeindex", "kwrangeindex", "querywindow", "querykind", "rangequery", "termgrid", "termlanes", "termblocks", "termsquery", "knnquery", "querycore", "querysnapshots"]

# -ffp-contract=off: no fused multiply-add, so that scores are bit-identical to the
# reference engine's (Python floats are IEEE doubles with the same operation order).
COMPILE_ARGS = ["-std=c++17", "-ffp-contract=off"] + (["-O0", "-g"] if DEBUG else ["-O3"])

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": False,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "nonecheck": False,
    "embedsignature": True,
}


def core_extension(name: str) -> Extension:
    return Extension(
        f"skype._core.{name}",
        [f"csrc/skype/_core/{name}.pyx"],
        include_dirs=[numpy.get_include(), "csrc"],
        language="c++",
        extra_compile_args=COMPILE_ARGS,
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )


EXTENSIONS = [core_extension(name) for name in CORE_MODULES]

# The extensions compile in parallel, one job per core (``build_ext --parallel``); pip's build
# of ``pip install -e .`` goes through this too.  ``SKYPE_BUILD_JOBS`` overrides the count.
BUILD_JOBS = int(os.environ.get("SKYPE_BUILD_JOBS", "0")) or (os.cpu_count() or 1)

setup(
    options={"build_ext": {"parallel": BUILD_JOBS}},
    ext_modules=cythonize(
        EXTENSIONS,
        include_path=["csrc"],
        build_dir="build/cython",
        compiler_directives=DIRECTIVES,
        annotate=os.environ.get("SKYPE_ANNOTATE") == "1",
        nthreads=BUILD_JOBS,
    ),
)
