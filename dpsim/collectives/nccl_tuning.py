"""NCCL's tuning constants, quoted as facts from NVIDIA/nccl, and the ``--algo/--proto`` choice lists.

Constants from ``src/graph/tuning.cc`` and ``src/enqueue.cc`` of NVIDIA/nccl at commit
``5067397c2676d5aed50042fc39e5c8ee96eb0027`` (2026-06); see :mod:`dpsim.collectives.nccl`
for how the model uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.errors import ConfigError
from dpsim.units import KiB

NCCL_COMMIT = "5067397c2676d5aed50042fc39e5c8ee96eb0027"
PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHM_NAMES = ("ring", "tree", "nvls", "nvls_tree", "hierarchical", "halving_doubling")
"""``--algo`` values: every algorithm of :data:`dpsim.collectives.algorithms.ALGORITHMS` (a test keeps
them equal), listed here so that parsing the flags does not load the algorithms."""
NCCL_DEFAULT_ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree")
"""What NCCL chooses among by default (no CollNet: dpsim models no in-network switch
reduction on NICs). ``hierarchical`` and ``halving_doubling`` are what-ifs: only used
when ``--algo`` names them."""
PLACEMENTS = ("packed", "interleaved")
"""``--placement`` values for ``--jobs``."""

# src/graph/tuning.cc@5067397 ncclTunerConstantsDefaults.baseLatencies, us: (LL, LL128, Simple)
BASE_LATENCY_US = {
    "tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0),
}
# ... hwLatencies[NVLINK|PCI|NET][algo], us: (LL, LL128, Simple)
HW_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0, 0, 25.0), "nvls_tree": (0, 0, 25.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0, 0, 0.0), "nvls_tree": (0, 0, 0.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0, 0, 18.0), "nvls_tree": (0, 0, 20.9)},
}
# ... llMaxBws, GB/s, by GPU generation (single server) or CPU (Intel row, across servers) x (1, 2, >2 servers)
LL_MAX_BW_GBPS = {"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0), "hopper": (141.0, 45.0, 35.0),
                  "blackwell": (282.0, 90.0, 70.0)}
# ... nvlsEfficiency by generation
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
# ... treeCorrectionFactor[proto][log2(bytes / 64)], 64 B .. 256 MiB
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
# src/include/comm.h / device.h@5067397: thread thresholds (bytes per thread) and threads per channel
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
# Pipeline chunk per channel (src/init.cc buffer sizes / NCCL_STEPS = 8; src/enqueue.cc calcCollChunking)
CHUNK_BYTES = {"LL": 32 * KiB, "LL128": 576_000, "Simple": 512 * KiB}
NVLS_CHUNK_BYTES = 128 * KiB  # src/transport/nvls.cc NCCL_NVLS_CHUNKSIZE default
NVLS_CHANNELS = {"hopper": 16, "blackwell": 32}  # src/transport/nvls.cc NVLS_NCHANNELS_SM90 / SM100
NCCL_STEPS = 8  # src/include/device.h: FIFO slots per connection (chunks in flight)

GENERATION = {"v100": "volta", "v100-16gb": "volta", "a100": "ampere", "h100": "hopper", "h200": "hopper",
              "b200": "blackwell"}
"""GPU preset -> architecture generation (compute capability 7.0, 8.0, 9.0, 10.0)."""

ALGO_ALIASES = {"hd": "halving_doubling", "nvlstree": "nvls_tree", "hier": "hierarchical"}


def nvls_available(spec) -> bool:
    """NVLink SHARP: NVSwitch servers of Hopper or later, unless ``node.nvls`` says otherwise."""
    if spec.node.nvls is not None:
        return bool(spec.node.nvls) and spec.node.interconnect == "nvswitch"
    return spec.node.interconnect == "nvswitch" and GENERATION.get(spec.gpu) in ("hopper", "blackwell")


def parse_algorithms(text: str | None, field_name: str = "--algo") -> tuple[str, ...] | None:
    """``ring,tree`` or ``^nvls`` (like NCCL_ALGO) -> allowed algorithm names; ``None`` = NCCL's default."""
    if text is None or text.strip() == "":
        return None
    return _parse_list(text, ALGORITHM_NAMES, field_name, aliases=ALGO_ALIASES,
                       default=NCCL_DEFAULT_ALGORITHMS)


def parse_protocols(text: str | None, field_name: str = "--proto") -> tuple[str, ...] | None:
    """``LL128,Simple`` or ``^LL`` (like NCCL_PROTO) -> allowed protocols; ``None`` = all."""
    if text is None or text.strip() == "":
        return None
    return _parse_list(text, PROTOCOLS, field_name, aliases={}, default=PROTOCOLS)


def _parse_list(text, choices, field_name, *, aliases, default):
    raw = text.strip()
    exclude = raw.startswith("^")
    names = [t.strip() for t in raw.lstrip("^").split(",") if t.strip()]
    lookup = {c.lower(): c for c in choices}
    out = []
    for t in names:
        key = aliases.get(t.lower(), t.lower())
        if key not in lookup:
            raise ConfigError(f"{field_name}: {t!r} is not known; choose from {', '.join(choices)} "
                              f"(comma-separated, or ^name to exclude)")
        out.append(lookup[key])
    if not out:
        raise ConfigError(f"{field_name}: {text!r} names nothing; choose from {', '.join(choices)}")
    if exclude:
        left = tuple(c for c in default if c not in out)
        if not left:
            # NCCL would fall back to its full choice; a restriction that allows nothing is a mistake.
            raise ConfigError(f"{field_name}: {text!r} excludes every one of {', '.join(default)}; "
                              f"nothing is left to choose from (exclude fewer, or name the ones to allow)")
        return left
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True, kw_only=True)
class NcclTuning:
    """Software constants of the model that are *fitted*, not read from NCCL's source."""

    nvls_tree_rtt_scale: float = 1.0
    """Round trip of an NVLS-tree chunk slot, as a multiple of NCCL's NVLS + NVLSTree hop
    latencies (25 + 20.9 us on Hopper). 1.0 = NCCL's own latencies."""


FITTED_TUNING = NcclTuning(nvls_tree_rtt_scale=1.51)
"""The default: ``nvls_tree_rtt_scale`` fitted on OCI BM.GPU.H100.8 x2 (collectives.csv
C059: 1 GiB all-reduce, 16x200 Gb/s RoCE, NCCL 2.21.5) by
``python validation/accuracy_collectives.py --fit``, and *tested* on AWS p5 (C050-C058), a
different system (EFA). Nothing is fitted on the A100 or p4de rows."""


def check_job_flags(jobs: int, placement: str) -> None:
    """Validate ``--jobs`` and ``--placement``."""
    if not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs: {jobs} is not valid; expected an integer >= 1")
    if placement not in PLACEMENTS:
        raise ConfigError(f"--placement: {placement!r} is not valid; choose packed or interleaved")
