"""The settings of one engine: which engine, its structures and its window, from a mapping of options.

:class:`EngineOptions` is what :class:`skype.Engine` is built from: every structure and parameter
of the core (``docs/engine.md``), with the engine's defaults; the engine checks the values.
:class:`EngineSettings` holds the part of them a run chooses from the command line, with the
command line's defaults, and the window; :func:`window_of` is the one rule for a window
given as options (a count, a time span, or neither: :data:`DEFAULT_WINDOW` messages).  Both the
single-engine driver (:mod:`skype.simulate`) and the distributed run's settings
(:meth:`skype.dskype.plan.RunSettings.from_options`) build their engines from here, so this module
imports nothing of the package: it sits below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypedDict

ENGINES = ("core", "reference")
REGISTRATIONS = ("search", "replay")
DEFAULT_WINDOW = 10_000

Options = Mapping[str, Any]


def pick(cls, options: Options, **derived: Any):
    """``cls`` (a dataclass) built from the options that name its fields (absent or unknown ones:
    the defaults), and the ``derived`` values."""
    names = {f.name for f in fields(cls)}
    values = {name: options[name] for name in names if name in options}
    values.update(derived)
    return cls(**values)


def window_of(options: Options) -> dict[str, Any]:
    """The window of the options: ``{"window": N}`` (count) or ``{"window_seconds": T}`` (time);
    neither given: a count window of :data:`DEFAULT_WINDOW`."""
    count, seconds = options.get("window"), options.get("window_seconds")
    if count is None and seconds is None:
        return {"window": DEFAULT_WINDOW}
    return {"window": count} if count is not None else {"window_seconds": seconds}


@dataclass(frozen=True)
class EngineOptions:
    """The structures and parameters of one :class:`skype.Engine` (the window, the space and the
    vocabulary are the engine's own arguments); each field is described in the engine's
    docstring and ``docs/engine.md``.  ``Engine(options)`` takes one of these or a mapping of
    its field names; ``Engine(index="igpt")`` is the same as ``Engine(EngineOptions(index="igpt"))``.

    >>> EngineOptions(index="igpt").with_changes(buffer="exact").buffer
    'exact'
    """

    index: str = "cone"
    buffer: str = "cskyband"
    block_size: int = 64
    bands: int = 8
    column_test: bool = False
    leaf_capacity: int = 1000
    groups: int = 10
    pruning: Mapping[str, bool] | None = None
    kmax: int = 60
    skyband_ratio: float = 0.8
    cost: Mapping[str, object] | None = None
    ciq: Mapping[str, object] | None = None
    cone: Mapping[str, object] | None = None
    message_index: str | None = None
    micro_batch: int = 1
    message_leaf_capacity: int = 64
    theta_refresh: float = 0.02
    cell_walk: str = "auto"
    reverse_map: bool = True
    exact_holders: bool = True
    timers: bool = False
    registration: str = "search"
    snapshots: bool = False
    term_trees: str = "lazy"
    query_grid: int = 64
    knn_buffer: int = 2

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def with_changes(self, **changes: Any) -> EngineOptions:
        """A copy with some fields changed (an unknown name raises ``TypeError``)."""
        return replace(self, **changes)


class EngineKeywords(TypedDict, total=False):
    """The fields of :class:`EngineOptions` as keyword arguments of :class:`skype.Engine` (its
    thin front), so that a type checker sees each keyword's name and type."""

    index: str
    buffer: str
    block_size: int
    bands: int
    column_test: bool
    leaf_capacity: int
    groups: int
    pruning: Mapping[str, bool] | None
    kmax: int
    skyband_ratio: float
    cost: Mapping[str, object] | None
    ciq: Mapping[str, object] | None
    cone: Mapping[str, object] | None
    message_index: str | None
    micro_batch: int
    message_leaf_capacity: int
    theta_refresh: float
    cell_walk: str
    reverse_map: bool
    exact_holders: bool
    timers: bool
    registration: str
    snapshots: bool
    term_trees: str
    query_grid: int
    knn_buffer: int


@dataclass(frozen=True)
class EngineSettings:
    """Which engine runs the stream, its structures (the keyword arguments of
    :class:`skype.Engine`, ``docs/engine.md``) and its window.  The defaults are the command
    line's defaults."""

    engine: str = "core"                # the Cython core, or the brute-force "reference"
    index: str = "cone"
    buffer: str = "cskyband"
    kmax: int = 60
    skyband_ratio: float = 0.8
    block_size: int = 64
    bands: int = 8
    leaf_capacity: int = 1000
    groups: int = 10
    message_index: str | None = None    # None: quadtree for the exact buffer, lists otherwise
    micro_batch: int = 1
    reverse_map: bool = True
    exact_holders: bool = True
    registration: str = "search"
    timers: bool = False
    window: int | None = None           # neither window: a count window of DEFAULT_WINDOW
    window_seconds: float | None = None

    @classmethod
    def from_options(cls, options: Options) -> EngineSettings:
        return pick(cls, options)

    @property
    def window_spec(self) -> dict[str, Any]:
        return window_of({"window": self.window, "window_seconds": self.window_seconds})

    def engine_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`skype.Engine` (the default registration left out, so
        that saved plans do not name it)."""
        options: dict[str, Any] = dict(
            index=self.index, buffer=self.buffer, kmax=self.kmax, skyband_ratio=self.skyband_ratio,
            block_size=self.block_size, bands=self.bands, leaf_capacity=self.leaf_capacity, groups=self.groups,
            reverse_map=self.reverse_map, message_index=self.message_index, micro_batch=self.micro_batch,
            exact_holders=self.exact_holders, timers=self.timers)
        if self.registration != "search":
            options["registration"] = self.registration
        return options

    def options(self, **more: Any) -> EngineOptions:
        """The :class:`EngineOptions` of these settings (and ``more`` fields)."""
        return EngineOptions(**self.engine_options(), **more)

    def describe(self) -> str:
        return self.engine if self.engine == "reference" else f"core ({self.index}, {self.buffer})"


def engine_options(options: Options | EngineSettings) -> dict[str, Any]:
    """Keyword arguments of :class:`skype.Engine` from engine options (a mapping or settings)."""
    return (options if isinstance(options, EngineSettings) else EngineSettings.from_options(options)).engine_options()
