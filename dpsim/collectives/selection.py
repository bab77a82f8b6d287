"""What NCCL would pick: which algorithm x protocol may run an op here, and the fastest of them.

NCCL enables protocols per algorithm and fabric (LL128 only where rings stay on NVLink, only
what the NICs' transport allows across servers, RCCL's own rules on AMD GPUs) and runs the
fastest enabled pair by its estimate (``topoGetAlgoInfo``). dpsim picks by the cost of
:class:`~dpsim.collectives.nccl_cost.NcclCost`, the measured ramp included (see :func:`fastest`);
``--algo``/``--proto`` narrow the choice like ``NCCL_ALGO``/``NCCL_PROTO``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dpsim.collectives.algorithms import ALGORITHMS
from dpsim.collectives.algorithms.base import Cluster
from dpsim.collectives.fabric_facts import FabricFacts
from dpsim.collectives.nccl_cost import Choice
from dpsim.errors import ConfigError


def protocol_enabled(facts: FabricFacts, algorithm: str, protocol: str) -> bool:
    """Whether NCCL (or RCCL) runs ``algorithm`` in ``protocol`` on this fabric."""
    if algorithm in ("nvls", "nvls_tree"):
        return protocol == "Simple"
    if facts.crosses_nics and protocol not in facts.fabric.transport.network_protocols:
        return False  # the network plugin set NCCL_PROTO (e.g. Simple only on EFA v1)
    if protocol == "LL128":
        # NCCL enables LL128 only where rings stay on NVLink (typeIntra <= PATH_NVB); RCCL only
        # on the systems its model table marks ll128Enabled (not MI300X's, rome_model_79).
        if facts.rccl or facts.intra_hw != "nvlink":
            return False
        if facts.n_nodes > 1 and facts.generation in ("volta", "ampere"):
            return False
        # ... and where the path to the NIC is at most PATH_PXB (PATH_PXN from sm90); without
        # GPUDirect RDMA NCCL diverts it through the CPU (src/graph/paths.cc@5067397
        # ncclTopoComputePaths, ncclTopoCheckGdr == 0: PATH_PHB or worse), so sockets and
        # host-staged RDMA never run LL128 across servers (src/graph/tuning.cc@5067397).
        if facts.crosses_nics and not facts.fabric.transport.gpudirect:
            return False
    # ROCm/rccl@0cbce2a7 src/graph/tuning.cc: no tree/Simple when every rank of a gfx94x
    # (MI300) communicator is on one node.
    return not (facts.rccl and algorithm == "tree" and protocol == "Simple" and facts.n_nodes == 1
                and facts.spec.gpu == "mi300x")


def candidates(facts: FabricFacts, cluster: Cluster, algorithms: Iterable[str], protocols: Iterable[str],
               op: str) -> list[tuple[str, str]]:
    """Algorithm x protocol pairs among those allowed that can run ``op`` here."""
    out = []
    for a in algorithms:
        if not ALGORITHMS[a].supports(op, cluster):
            continue
        for p in protocols:
            if protocol_enabled(facts, a, p):
                out.append((a, p))
    return out


def no_candidate_error(facts: FabricFacts, algorithms, protocols, op: str, forced: bool) -> ConfigError:
    """The one-line error when nothing can run ``op`` (naming the flags when they narrowed the choice)."""
    if not forced:
        return ConfigError(f"no algorithm can run {op} here")
    return ConfigError(
        f"--algo/--proto: none of {', '.join(algorithms)} x {', '.join(protocols)} can run "
        f"{op} on {facts.n_ranks} GPUs of {facts.spec.name!r} (nvls needs NVSwitch and Hopper or later; "
        "nvls runs inside one server, nvls_tree across several; halving_doubling reduce_scatter and "
        "all_gather need a power-of-two number of GPUs; the NICs' transport lets only the protocols "
        f"{', '.join(facts.fabric.transport.network_protocols) if facts.crosses_nics else 'any'} "
        "cross servers)")


def fastest(options: Iterable[tuple[str, str]], cost: Callable[[str, str], Choice]) -> Choice:
    """The option whose ``cost(algorithm, protocol)`` is shortest.

    The fastest *with* the measured ramp, not NCCL's own pick (its estimate has no ramp):
    switching by that estimate from a ramped Simple option to LL one size up would make a larger
    message finish sooner, which no reference table shows; a minimum of options each monotone
    in size stays monotone."""
    return min((cost(a, p) for a, p in options), key=lambda c: c.time_s)


def describe_choices(results) -> str:
    """``# algorithm: 8..32768 B ring/LL; 65536..1073741824 B tree/Simple`` for a size sweep."""
    spans: list[list] = []
    for r in results:
        key = f"{r.algorithm}/{r.protocol}"
        if spans and spans[-1][0] == key:
            spans[-1][2] = int(r.size_bytes)
        else:
            spans.append([key, int(r.size_bytes), int(r.size_bytes)])
    return "# algorithm: " + "; ".join(f"{lo}..{hi} B {key}" if lo != hi else f"{lo} B {key}" for key, lo, hi in spans)
