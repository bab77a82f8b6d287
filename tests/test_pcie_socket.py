"""NCCL's default socket transport on PCIe servers against published nccl-tests rows (issue 26).

Two L40S servers over the socket transport with NCCL's defaults (no helper thread, one socket
per connection): ``tests/data/pcie_collectives_reference.csv`` P014-P030, never fitted on.
"""

from __future__ import annotations

import sys
from pathlib import Path

VALIDATION = Path(__file__).resolve().parents[1] / "validation"
SYSTEM = "l40s-r760xa-tcp-x2"


def _points():
    sys.path.insert(0, str(VALIDATION))
    import accuracy_pcie

    return [p for p in accuracy_pcie.collective_points() if p.row.system == SYSTEM], accuracy_pcie


def test_default_socket_transport_runs_simple_from_one_mib_within_the_bar():
    """The measured times step from 160 us at 512 KiB to 166 us at 1 MiB and ~8 GB/s from there:
    Simple at full rate. With the helper-thread sockets' ramp the model ran ring/LL to 4 MiB and
    was 24-82 % slow at 1-32 MiB; as the proxy-driven single socket it is ring/Simple from 1 MiB,
    every row within 35 % and the system's geomean under issue 26's 10 %."""
    points, acc = _points()
    scored = [p for p in points if p.row.scored]
    assert len(scored) >= 10
    for p in scored:
        assert p.protocol == "Simple", (p.row.id, p.protocol)
        assert abs(p.predicted_s / p.row.measured_s - 1) <= 0.35, (p.row.id, p.predicted_s, p.row.measured_s)
    assert acc.geomean_abs_error(points) <= 0.10


def test_helper_thread_sockets_ramp_slower_than_the_default_single_socket():
    """The same servers with two helper-thread sockets per connection (NCCL_SOCKET_NTHREADS=2,
    as the V100 TCP reference run sets) take the staged ramp: a 4 MiB all-reduce is slower,
    and the largest messages (the ramp closed) take the same time to a few percent."""
    import dataclasses

    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.topology.cluster import Topology
    from dpsim.topology.load import load_topology_file

    spec = load_topology_file(VALIDATION / "systems" / f"{SYSTEM}.yaml")
    one = spec.fabric.transport
    # Same aggregate socket rate, so only the data path differs.
    two = dataclasses.replace(one, streams_per_connection=2, stream_bytes_per_s=one.stream_bytes_per_s / 2)
    helper = dataclasses.replace(spec, fabric=dataclasses.replace(spec.fabric, transport=two))
    default, threaded = (NcclCollectives(Topology.from_spec(s, 2)) for s in (spec, helper))
    assert default.facts.ramp_scope == "verbs" and threaded.facts.ramp_scope == "staged"
    mid = 4 * 2**20
    assert threaded.time("all_reduce", mid).time_s > 1.2 * default.time("all_reduce", mid).time_s
    # The staged ramp only ever adds time, so ">=" would hold whatever the ramp: at 8 GiB it has
    # closed, and the two paths must agree to a few percent (2.2 % today).
    big = 8 * 2**30
    ratio = threaded.time("all_reduce", big).time_s / default.time("all_reduce", big).time_s
    assert 1.0 <= ratio <= 1.05, ratio
