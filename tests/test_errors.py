"""The error catalogue: input errors apart from operational ones, one code per message, and the
HTTP statuses of both."""

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from skype import errors
from skype.errors import ALIASES, OPERATIONAL, CodedError, Errors, InputError, OperationalError, SkypeError

ROOT = Path(errors.__file__).resolve().parents[1]


def _codes() -> dict[str, str]:
    return {name: value for name, value in vars(Errors).items() if re.fullmatch(r"E\d{3}", name)}


def _raise_sites():
    """(class name, code, place) of every ``SomeError("Ennn", ...)`` call in the package and the core."""
    for path in sorted((ROOT / "skype").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                    and re.fullmatch(r"E\d{3}", node.args[0].value)):
                yield node.func.id, node.args[0].value, f"{path.relative_to(ROOT)}:{node.lineno}"
    for path in sorted((ROOT / "csrc").rglob("*.pyx")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for cls, code in re.findall(r"(\w+Error)\(\"(E\d{3})\"", line):
                yield cls, code, f"{path.relative_to(ROOT)}:{n}"


def test_operational_codes_are_raised_as_operational_errors_and_only_they():
    wrong = []
    for cls, code, place in _raise_sites():
        if cls == "OperationalError" and code not in OPERATIONAL:
            wrong.append(f"{place}: {code} is an input error")
        if cls == "InputError" and code in OPERATIONAL:
            wrong.append(f"{place}: {code} is operational")
    assert not wrong, wrong
    assert {code for cls, code, _ in _raise_sites() if cls == "OperationalError"} == OPERATIONAL


def test_every_raised_code_is_in_the_catalogue_and_no_alias_is_raised():
    codes = _codes()
    for cls, code, place in _raise_sites():
        if cls in ("InputError", "OperationalError"):
            assert code in codes, place
            assert code not in ALIASES, f"{place}: {code} was merged into {ALIASES.get(code)}"


def test_one_code_per_message():
    """Two codes with one template are one error: merge them (the old code stays an alias)."""
    by_text = defaultdict(list)
    for name, text in _codes().items():
        if name not in ALIASES:
            by_text[text].append(name)
    assert [names for names in by_text.values() if len(names) > 1] == []
    for old, new in ALIASES.items():
        assert getattr(Errors, old) == getattr(Errors, new)


def test_the_two_kinds_and_the_aliases():
    bad, busy = InputError("E003", value=0), OperationalError("E093", size=4)
    assert isinstance(bad, ValueError) and not isinstance(busy, ValueError)
    assert isinstance(busy, RuntimeError) and not isinstance(bad, RuntimeError)
    assert all(isinstance(e, CodedError) and isinstance(e, SkypeError) for e in (bad, busy))
    assert str(busy) == "the engine queue is full (4 requests waiting): retry later [E093]"
    old = InputError("E060", what="grid", expected="two integers", value=1)
    assert old.code == "E023" and str(old) == "grid must be two integers, got 1 [E023]"
    assert OperationalError("E064", path="d", detail="x").located(source="f").source == "f"


def test_the_http_status_of_each_kind():
    pytest.importorskip("aiohttp")
    pytest.importorskip("prometheus_client")
    from skype.service.app import STATUS, error_response

    assert error_response(OperationalError("E093", size=1)).status == 429
    assert error_response(OperationalError("E098", limit=1)).status == 429
    assert error_response(OperationalError("E094", status="recovering")).status == 503
    assert error_response(OperationalError("E131", batch=1, where="w", advice="a")).status == 503  # unmapped
    assert error_response(InputError("E003", value=0)).status == 400
    assert error_response(InputError("E020", id=1)).status == 404
    assert all(400 <= status < 500 or code in OPERATIONAL for code, status in STATUS.items())
