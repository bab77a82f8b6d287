"""What every collective algorithm provides: a compact *plan* and an explicit *schedule*.

A **plan** is what the cost model needs, at any scale: a few *phases*, each a set of
concurrent flows (source, destination, bytes as a fraction of the message S) that the
network model shares max-min, repeated ``repeat`` times one after another (identical
ring steps), plus the hop counts of NCCL's latency model and, for pipelined algorithms
(trees, chains), the pipeline depth that costs a fill time. Endpoints are GPU indices
``node * gpus_per_node + local``; ``-1 - node`` is a server's NVSwitch (the reduction
point of NVLink SHARP).

A **schedule** is the same traffic spelled out step by step for small clusters, with
which chunk each send carries and whether the receiver reduces or copies it. Tests
execute schedules symbolically (every rank must end with the right fully reduced data,
each contribution counted once) and check that a schedule moves exactly the bytes its
plan charges on every (source, destination) pair: the plan is the schedule, compressed.
"""

from __future__ import annotations

import math
from dataclasses import field

import numpy as np

from dpsim.collectives.ops import check_op as check_message_op
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.topology.fabric import nic_layout
from dpsim.topology.server import build_server


@frozen_dataclass
class Phase:
    """Concurrent flows, run ``repeat`` times back to back."""

    src: np.ndarray
    """Endpoint index of each flow."""
    dst: np.ndarray
    """Endpoint index of each flow."""
    fraction: np.ndarray
    """Bytes each flow moves per repetition, as a fraction of the message size S."""
    repeat: int = 1
    """Identical repetitions (ring steps)."""
    name: str = ""
    """For reports (``intra reduce-scatter``...)."""


@frozen_dataclass
class Plan:
    """An algorithm's traffic for one op on one cluster, compressed."""

    algorithm: str
    """Algorithm name."""
    op: str
    """Collective."""
    phases: tuple[Phase, ...]
    """Run one after another."""
    intra_hops: float
    """Hops inside a server along the critical path (NCCL's latency model)."""
    inter_hops: float
    """Hops that cross servers along the critical path."""
    channels: int = 1
    """Parallel pipelines the data is split over (chunking of pipelined plans)."""
    pipeline_intra: int = 0
    """Pipelined plans: stages inside servers a chunk crosses before it is done."""
    pipeline_inter: int = 0
    """Pipelined plans: stages across servers a chunk crosses before it is done."""
    nvls_flows: np.ndarray | None = None
    """Per flow of the single phase: moved by in-switch reduction (NVLS efficiency applies)."""


@frozen_dataclass
class Send:
    """One transfer of an explicit schedule."""

    src: int
    """Endpoint index."""
    dst: int
    """Endpoint index."""
    chunks: tuple[int, ...]
    """Which chunks of the message it carries."""
    chunk_fraction: float
    """Size of one chunk as a fraction of S."""
    reduce: bool
    """The receiver adds the data to its own (``True``) or replaces its copy (``False``)."""

    @property
    def fraction(self) -> float:
        """Bytes moved, as a fraction of S."""
        return self.chunk_fraction * len(self.chunks)


@frozen_dataclass
class Schedule:
    """Steps of sends; sends within a step are concurrent."""

    steps: list[list[Send]]
    """In order."""
    n_chunks: int
    """The message is cut into this many chunks (equal sizes)."""
    owners: dict[int, int] = field(default_factory=dict)
    """reduce_scatter: chunk -> rank that must end with it; all_gather/broadcast: chunk -> rank that starts with it."""


@frozen_dataclass
class Cluster:
    """The ranks of one communicator on a topology, as algorithms see them."""

    n_ranks: int
    """GPUs in the communicator."""
    gpus_per_node: int
    """GPUs per server used (a partial single server may use fewer)."""
    n_nodes: int
    """Servers."""
    stride: int
    """Index stride of a server (the design's GPUs per node)."""
    channels: int
    """NCCL channels across servers (one per NIC node)."""
    nic_nodes: int
    """NIC nodes per server (0 without a NIC fabric)."""
    nvls: bool
    """NVLink SHARP available."""
    single_domain: bool = True
    """Every rank in one NVLink domain (one server, an NVLink switch tier, or an
    ``nvlink_domain`` holding all the servers)."""
    ring_orders: tuple[tuple[int, ...], ...] = ()
    """Cycles over a server's GPUs that rings follow (:func:`dpsim.topology.server.ring_orders`;
    empty: the GPUs in order)."""

    @classmethod
    def of(cls, topology, nvls: bool = False) -> Cluster:
        """From a :class:`~dpsim.topology.Topology`."""

        spec = topology.spec
        orders = build_server(spec).ring_orders if topology.gpus_per_node == spec.node.gpus_per_node else ()
        if orders and all(tuple(o) == tuple(range(len(o))) for o in orders):
            orders = ()
        return cls(n_ranks=topology.n_gpus, gpus_per_node=topology.gpus_per_node, n_nodes=topology.n_nodes,
                   stride=spec.node.gpus_per_node, channels=topology.channels,
                   nic_nodes=nic_layout(spec).nic_nodes, nvls=nvls, single_domain=topology.single_nvlink_domain, ring_orders=orders)

    def cycle(self, channel: int) -> np.ndarray:
        """The server cycle channel ``channel``'s ring follows (the GPUs in order by default)."""
        if not self.ring_orders:
            return np.arange(self.gpus_per_node)
        return np.asarray(self.ring_orders[channel % len(self.ring_orders)], dtype=np.int64)

    def ring_cycle(self, channel: int) -> np.ndarray:
        """The cycle ring ``channel`` follows inside every server: its own cycle, except across
        servers with a NIC per GPU, where every channel enters a server on the rail it leaves
        by only if all channels follow one cycle (:func:`~dpsim.collectives.algorithms.ring.ring_order_indices`)."""
        if self.n_nodes > 1 and self.nic_nodes and self.gpus_per_node // self.nic_nodes == 1:
            return self.cycle(0)
        return self.cycle(channel)

    @property
    def intra_rings(self) -> int:
        """Rings a single server runs: one per cycle of :attr:`ring_orders` (one by default)."""
        return max(1, len(self.ring_orders))

    def index(self, node, local):
        """Endpoint index of GPU ``local`` of server ``node`` (arrays welcome)."""
        return np.asarray(node) * self.stride + np.asarray(local)

    def rank_index(self, rank):
        """Endpoint index of communicator rank ``rank`` (node-major rank order)."""
        node, local = np.divmod(np.asarray(rank), self.gpus_per_node)
        return node * self.stride + local

    def head(self, channel: int) -> int:
        """Local GPU whose NIC carries ``channel`` across servers (first GPU on that NIC's PCIe switch)."""
        if self.nic_nodes == 0:
            return channel % self.gpus_per_node
        nic = channel % self.nic_nodes
        return nic * (self.stride // self.nic_nodes) % self.gpus_per_node


def btree_parents(n: int) -> np.ndarray:
    """Parent of each rank in NCCL's binary tree over ``n`` ranks (-1 for the root, rank 0).

    The shape of ``ncclGetBtree`` (NVIDIA/nccl src/graph/trees.cc): with ``b`` the lowest
    set bit of rank ``r``, the parent is ``(r ^ b) | (b << 1)``, or ``r ^ b`` when that
    is out of range. Leaves alternate with inner nodes, so half the ranks are leaves and
    each inner rank has at most two children.
    """
    # Rank numbers fit 32 bits: half the memory of the per-rank arrays at 32,768 servers.
    r = np.arange(n, dtype=np.int32)
    parent = np.full(n, -1, dtype=np.int32)
    if n <= 1:
        return parent
    low = r & -r
    up = (r ^ low) | (low << 1)
    up = np.where(up >= n, r ^ low, up)
    parent[1:] = up[1:]
    return parent


def dtree_parents(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The two trees of NCCL's double binary tree (``ncclGetDtree``): the btree, and its
    mirror (even ``n``) or its shift by one rank (odd ``n``), so that a rank that is an
    inner node in one tree is a leaf in the other."""
    first = btree_parents(n)
    r = np.arange(n, dtype=np.int32)
    if n % 2 == 1:
        shifted = btree_parents(n)[(r - 1) % n]
        second = np.where(shifted < 0, -1, (shifted + 1) % n)
    else:
        mirrored = btree_parents(n)[n - 1 - r]
        second = np.where(mirrored < 0, -1, n - 1 - mirrored)
    return first, second


def tree_depth(parent: np.ndarray) -> int:
    """Edges on the longest root-to-leaf path."""
    x = np.arange(len(parent), dtype=np.int32)
    depth = np.zeros(len(parent), dtype=np.int32)
    while True:
        up = parent[x]
        moving = up >= 0
        if not moving.any():
            return int(depth.max(initial=0))
        depth += moving
        x = np.where(moving, up, x)


def check_op(op: str, supported: tuple[str, ...], algorithm: str) -> None:
    """Raise :class:`ConfigError` unless ``algorithm`` implements ``op``."""
    check_message_op(op)
    if op not in supported:
        raise ConfigError(f"--algo: {algorithm} does not implement {op}; it implements {', '.join(supported)}")


def log2_floor(n: int) -> int:
    """``floor(log2(n))`` for n >= 1 (NCCL's ``log2i``)."""
    return math.floor(math.log2(n)) if n >= 1 else 0
