"""NVLS all-reduce in chunk steps (issue 12, nvswitch class).

Golden cases worked by hand from NCCL's ``calcCollChunking`` NVLS branch
(NVIDIA/nccl src/enqueue.cc@593de54e:2007-2016, v2.27.7-1, the version of the H200 and B200
reference runs): concurrent ops = NVLS channels x heads (16 x 8 on one H200 server, 24 x 8
on one B200 server, src/transport/nvls.cc ``NVLS_NCHANNELS_SM90`` / ``_SM100_NVL``); the
128 KiB chunk drops to 64 / 32 / 16 KiB below 64 / 8 / 2 x ops x chunk; a channel moves one
chunk per head each step. Invariants of the model built on it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.nccl_tuning import FITTED_TUNING, nvls_chunk_breaks, nvls_steps, nvls_tuning
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_topology_file
from dpsim.units import KiB, MiB

REPO = Path(__file__).resolve().parents[1]


def _model(system: str, gpus: int = 8, **kw) -> NcclCollectives:
    spec = load_topology_file(REPO / "validation" / "systems" / f"{system}.yaml")
    return NcclCollectives(Topology.from_spec(spec, gpus), **kw)


@pytest.mark.parametrize("gen, size, chunk_kib, steps", [
    # H200: ops = 128; breaks at 2 x 128 x 32 KiB = 8 MiB, 8 x 128 x 64 KiB = 64 MiB, 64 x 128 x 128 KiB = 1 GiB.
    ("hopper", 4 * MiB, 16, 2),        # 4 MiB / (128 x 16 KiB)
    ("hopper", 32 * MiB, 32, 8),       # 32 MiB / (128 x 32 KiB)
    ("hopper", 256 * MiB, 64, 32),     # 256 MiB / (128 x 64 KiB)
    ("hopper", 1024 * MiB, 128, 64),   # 1 GiB / (128 x 128 KiB)
    # B200: ops = 192; breaks at 12 MiB, 96 MiB, 1.5 GiB. 8 and 16 MiB both take 3 steps.
    ("blackwell", 4 * MiB, 16, 2),     # ceil(4 / 3)
    ("blackwell", 8 * MiB, 16, 3),     # ceil(8 MiB / (192 x 16 KiB = 3 MiB))
    ("blackwell", 16 * MiB, 32, 3),    # ceil(16 MiB / 6 MiB)
])
def test_chunk_and_steps_follow_calccollchunking(gen, size, chunk_kib, steps):
    tuning = nvls_tuning(gen, 1, 0.0, 8, False)
    assert nvls_steps(tuning, 8, size) == (steps, chunk_kib * KiB)


def test_chunk_breaks_sit_where_ncclshrinks_the_chunk():
    hopper = nvls_tuning("hopper", 1, 0.0, 8, False)
    blackwell = nvls_tuning("blackwell", 1, 0.0, 8, False)
    assert nvls_chunk_breaks(hopper, 8) == [1024 * MiB, 64 * MiB, 8 * MiB]
    assert nvls_chunk_breaks(blackwell, 8) == [1536 * MiB, 96 * MiB, 12 * MiB]
    for tuning in (hopper, blackwell):
        for b in nvls_chunk_breaks(tuning, 8):
            assert nvls_steps(tuning, 8, b)[1] == 2 * nvls_steps(tuning, 8, b - 1)[1]


def test_the_systems_run_the_channels_and_heads_nccl_sets():
    h200, b200 = _model("h200-node"), _model("p6-b200-node")
    assert (h200.facts.nvls.channels, h200.facts.nvls_heads) == (16, 8)
    assert (b200.facts.nvls.channels, b200.facts.nvls_heads) == (24, 8)


def test_the_step_term_is_steps_times_the_fitted_step():
    m = _model("h200-node")
    t = FITTED_TUNING
    step = t.nvls_step_latency_us * 1e-6 + 8 * 16 * KiB / t.nvls_channel_bytes_per_s
    assert m.costs.nvls_steps_s("all_reduce", 4 * MiB) == pytest.approx(2 * step)
    # Reduce-scatter and all-gather make one of all-reduce's two switch passes per chunk.
    half = t.nvls_step_latency_us * 1e-6 + 4 * 16 * KiB / t.nvls_channel_bytes_per_s
    assert m.costs.nvls_steps_s("reduce_scatter", 4 * MiB) == pytest.approx(2 * half)


@pytest.mark.parametrize("system", ["h200-node", "p6-b200-node"])
@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def test_nvls_time_is_monotone_and_above_its_bandwidth_bound(system, op):
    m = _model(system)
    breaks = nvls_chunk_breaks(m.facts.nvls, m.facts.nvls_heads)
    sizes = sorted({*np.geomspace(64 * KiB, 32 * 2**30, 400).round(), *(b - 1 for b in breaks), *breaks,
                    *(b + 1 for b in breaks)})
    prev = 0.0
    for s in sizes:
        c = m.cost("nvls", "Simple", op, s)
        # Never faster for a larger message (exact: the cost takes the step term just below each
        # chunk break, where doubling the chunk halves the steps).
        assert c.time_s >= prev, s
        prev = c.time_s
        assert c.time_s >= c.latency_s + c.transfer_s * (1 - 1e-12), s


@pytest.mark.parametrize("system", ["h200-node", "p6-b200-node"])
def test_between_breaks_the_cost_is_the_raw_step_model(system):
    # Away from a chunk break's shadow the cost is latency + max(bandwidth, steps x step).
    m = _model(system)
    for s in (2 * MiB, 3 * MiB, 6 * MiB, 512 * MiB):
        raw = m.costs.raw_cost("nvls", "Simple", "all_reduce", s)
        steps, chunk = nvls_steps(m.facts.nvls, 8, s)
        want = max(raw.transfer_s, steps * m.tuning.nvls_step_s(8 * chunk))
        assert raw.time_s - raw.latency_s == pytest.approx(want)
    # Just above a break the halved steps would make it faster than just below: the cost holds
    # the value below (the drop is at most the steps lost x a: the bytes per channel are the same).
    b = nvls_chunk_breaks(m.facts.nvls, 8)[-1]
    below, above = m.cost("nvls", "Simple", "all_reduce", b - 1), m.costs.raw_cost("nvls", "Simple", "all_reduce", b)
    assert m.cost("nvls", "Simple", "all_reduce", b).time_s == pytest.approx(below.time_s)
    drop = below.time_s - above.time_s
    lost = nvls_steps(m.facts.nvls, 8, b - 1)[0] - nvls_steps(m.facts.nvls, 8, b)[0]
    assert 0 <= drop <= lost * m.tuning.nvls_step_latency_us * 1e-6 * (1 + 1e-9)


def test_without_fitted_steps_nvls_is_its_bandwidth_bound():
    from dpsim.collectives.nccl_tuning import NcclTuning

    m = _model("h200-node", tuning=NcclTuning())
    c = m.cost("nvls", "Simple", "all_reduce", 4 * MiB)
    assert m.costs.nvls_steps_s("all_reduce", 4 * MiB) == 0.0
    assert c.time_s == pytest.approx(c.latency_s + c.transfer_s)
