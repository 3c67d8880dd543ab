"""Grouping keys that land where we want: one subscription partition per Spark shuffle partition.

A grouped stateful operator sends the rows of grouping key ``g`` to Spark shuffle partition
``pmod(murmur3(g, seed=42), S)`` (``HashPartitioning``; ``S`` = ``spark.sql.shuffle.partitions``,
frozen in the checkpoint at the first run).  Keying by the raw partition ids 0..P-1 would let
several of them collide in one Spark partition while others stay empty (0 and 1 do collide for
S = 2), i.e. one task would run two partitions' engines one after the other.  So partition ``p``
is keyed by the smallest unused long ``g`` whose Spark partition is ``p mod S``: with ``S >= P``
every subscription partition gets a Spark task of its own.

:func:`spark_hash_long` re-implements Spark's ``Murmur3_x86_32.hashLong`` (seed 42, the seed of
``HashPartitioning`` and of the SQL function ``hash``) so the driver picks keys without a job; a
Spark test checks it against ``hash()``.
"""

from __future__ import annotations

_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
SEED = 42


def _int32(v: int) -> int:
    v &= _MASK
    return v - (1 << 32) if v & 0x80000000 else v


def _rotl(v: int, r: int) -> int:
    v &= _MASK
    return ((v << r) | (v >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK
    k1 = _rotl(k1, 15)
    return (k1 * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 = (h1 ^ k1) & _MASK
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 = (h1 ^ length) & _MASK
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1


def spark_hash_long(value: int, seed: int = SEED) -> int:
    """Spark's ``hash(CAST(value AS BIGINT))``: Murmur3 x86_32 of a long, as a signed int32.

    >>> spark_hash_long(0), spark_hash_long(1), spark_hash_long(-1)
    (-1670924195, -1712319331, -939490007)
    """
    v = value & 0xFFFFFFFFFFFFFFFF
    low, high = v & _MASK, v >> 32
    h1 = _mix_h1(seed & _MASK, _mix_k1(low))
    h1 = _mix_h1(h1, _mix_k1(high))
    return _int32(_fmix(h1, 8))


def spark_partition_of(value: int, num_shuffle_partitions: int) -> int:
    """The Spark shuffle partition of a long grouping key (``pmod(hash(key), S)``)."""
    return spark_hash_long(value) % num_shuffle_partitions


def grouping_keys(count: int, num_shuffle_partitions: int) -> list[int]:
    """Distinct long keys; key ``i`` lands in Spark partition ``i mod S``.

    >>> keys = grouping_keys(4, 4)
    >>> sorted(spark_partition_of(k, 4) for k in keys)
    [0, 1, 2, 3]
    """
    if count < 0 or num_shuffle_partitions < 1:
        raise ValueError(f"bad key request: count={count}, shuffle partitions={num_shuffle_partitions}")
    wanted: dict[int, list[int]] = {}
    for i in range(count):
        wanted.setdefault(i % num_shuffle_partitions, []).append(i)
    keys = [0] * count
    candidate = 0
    remaining = count
    while remaining:
        target = spark_partition_of(candidate, num_shuffle_partitions)
        queue = wanted.get(target)
        if queue:
            keys[queue.pop(0)] = candidate
            remaining -= 1
        candidate += 1
    return keys
