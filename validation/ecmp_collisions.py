"""What per-flow ECMP hashing would cost a ring collective on a leaf's uplinks (ecmp, issue 24; diagnosis only).

dpsim spreads every flow evenly over a leaf's equal-cost uplinks (:mod:`dpsim.topology.fabric`): no capacity is
lost to hash collisions. Ethernet fabrics that route RoCE by 5-tuple ECMP do lose it when few, large flows cross
them: "ECMP rendered poor performance for the training workload due to the low flow entropy" and hashing on the
RoCE destination QP with more QPs per connection gave "up to 40%" on AllReduce (Meta Engineering, "A RoCE network
for distributed AI training at scale", 2024-08-05, the blog of the SIGCOMM 2024 paper); Alibaba HPN (Qian et al.,
SIGCOMM 2024, doi:10.1145/3651890.3672265, abstract) names ECMP hash polarization under "a small number of
periodic, bursty flows" per host; NCCL added ``NCCL_IB_QPS_PER_CONNECTION`` for "RoCE configs which rely on ECMP
hashing ... when crossing multiple level of switches" (Mellanox/nccl-rdma-sharp-plugins#76, default 1).

This script computes the loss from a topology file and the flows NCCL opens, not from any row: ``k`` flows, each
wanting ``d`` of a cable (a NIC port's share: one over its connections x QPs), hash uniformly onto the ``m``
cables of a leaf's uplink (:func:`dpsim.topology.fabric.uplink_cables`); a cable with ``L`` flows gives each
``min(d, 1 / L)`` of its rate, and a ring runs at its slowest flow, so the collective's network time grows by
``E[max(1, d x L_max)]``. Two placements bound ``k``: *ring-ordered* (dpsim's: consecutive servers are ring
neighbours, so one edge of each ring leaves a leaf group) and *scattered* (every ring edge of a full leaf
leaves it: servers of a job spread over leaves). Which one a published run had is not published.

``python validation/ecmp_collisions.py`` prints both for every Ethernet RDMA topology of ``validation/systems``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS_DIR = ROOT / "validation" / "systems"


def ring_slowdown(flows: int, cables: int, demand: float, *, trials: int = 20000, seed: int = 0) -> float:
    """Expected factor on a ring's network time when ``flows`` flows, each wanting ``demand`` of one cable's
    rate, are hashed uniformly at random onto ``cables`` equal cables (balls into bins; fixed ``seed``)."""
    if flows < 1 or cables < 1 or not 0 < demand <= 1:
        raise ValueError(f"flows {flows}, cables {cables}, demand {demand}: need flows >= 1, cables >= 1, "
                         f"0 < demand <= 1")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, cables, size=(trials, flows))
    loads = np.zeros((trials, cables), dtype=np.int32)
    rows = np.repeat(np.arange(trials), flows)
    np.add.at(loads, (rows, picks.ravel()), 1)
    return float(np.mean(np.maximum(1.0, loads.max(axis=1) * demand)))


def leaf_flows(spec, communicators_per_nic: int = 1) -> tuple[int, int, int, float]:
    """(ring-ordered flows, scattered flows, cables, demand per flow) on one leaf's uplink of ``spec``."""
    from dpsim.topology.fabric import nic_layout, uplink_cables

    f = spec.fabric
    layout = nic_layout(spec)
    ports_on_leaf = layout.nic_nodes * layout.ports_per_nic // layout.rails
    per_port = f.transport.connections_per_nic * f.transport.streams_per_connection * communicators_per_nic
    ordered = ports_on_leaf * per_port
    return ordered, f.nodes_per_leaf * ordered, uplink_cables(spec)[0], 1.0 / per_port


def main() -> int:
    from dpsim.topology.load import load_topology_file

    print("topology | transport | cables per leaf uplink | ring-ordered flows: slowdown | scattered flows: slowdown")
    for path in sorted(SYSTEMS_DIR.glob("*.yaml")):
        spec = load_topology_file(path)
        f = spec.fabric
        if f is None or f.kind != "ethernet" or f.transport.kind != "roce":
            continue
        ordered, scattered, cables, demand = leaf_flows(spec)
        print(f"{spec.name:24s} {f.transport.name:5s} {cables:4d}   {ordered:4d}: {ring_slowdown(ordered, cables, demand):.3f}x"
              f"   {scattered:5d}: {ring_slowdown(scattered, cables, demand, trials=2000):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
