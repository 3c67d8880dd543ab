"""Every ``>>>`` example in the package's docstrings runs (``skype.spark``'s when pyspark is
installed: its modules import it)."""

import doctest
import importlib
import pkgutil

import pytest

import skype

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(skype.__path__, "skype.")
    if not m.name.startswith("skype._core")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name.startswith("skype.spark."):
        pytest.importorskip("pyspark")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
