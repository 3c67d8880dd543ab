"""Top-k re-evaluation (issue 4): EMP, average buffer size, re-evaluations per 1000 messages
and memory for IGPT with cSkyband, Skyband, kmax and exact buffers, plus the tuning sweeps of
the paper's Fig. 10 (kmax 20..100, Skyband ratio 0.5..1.0).

    pytest bench/test_buffers.py [--size medium|paper]
    pytest bench/test_buffers.py --size steady     # two whole windows after the fill

``bench/interleaved.py`` runs the same comparison with every configuration in one process,
chunk by chunk (the figures in docs/results.md).
"""

import pytest

from conftest import run_steady_state, spec_for


@pytest.mark.parametrize("window", ["count", "time"])
@pytest.mark.parametrize("buffer", ["cskyband", "skyband", "kmax", "exact"])
def test_buffer(benchmark, size, buffer, window):
    benchmark.group = f"buffers-tweets-{size}-{window}"
    spec = spec_for(size, buffer=buffer)
    if window == "time":
        spec = spec.with_(window=None, window_seconds=float(spec.window))
    run_steady_state(benchmark, spec)


@pytest.mark.parametrize("kmax", [20, 40, 60, 80, 100])
def test_kmax_sweep(benchmark, size, kmax):
    benchmark.group = f"fig10a-kmax-{size}"
    run_steady_state(benchmark, spec_for(size, buffer="kmax", params=(("kmax", kmax),)))


@pytest.mark.parametrize("ratio", [0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
def test_skyband_ratio_sweep(benchmark, size, ratio):
    benchmark.group = f"fig10b-skyband-{size}"
    run_steady_state(benchmark, spec_for(size, buffer="skyband", params=(("skyband_ratio", ratio),)))
