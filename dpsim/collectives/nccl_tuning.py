"""NCCL's tuning constants, quoted as facts from NVIDIA/nccl, and the ``--algo/--proto`` choice lists.

Constants from ``src/graph/tuning.cc`` and ``src/enqueue.cc`` of NVIDIA/nccl at commit
``5067397c2676d5aed50042fc39e5c8ee96eb0027`` (2026-06); see :mod:`dpsim.collectives.nccl`
for how the model uses them.
"""

from __future__ import annotations

import math

from dpsim.errors import ConfigError, TopologyError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GPU_PRESETS
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
# ... perChMaxTreeBws, GB/s per channel, by generation x (1, 2, >2 servers): what one channel (one
# CTA) of the double binary tree moves at most; NCCL caps a tree's bus bandwidth at channels x this
# when it picks an algorithm (ncclTopoTuneModel: busBw = min(busBw * .92, nChannels * perChMaxTreeBw))
PER_CHANNEL_MAX_TREE_BW_GBPS = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                                "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
# ... perChMaxRingLL128Bws and perChMaxTreeLL128Bws, GB/s per channel, by generation x (1, 2, >2 servers):
# what one channel (one CTA) moves in the LL128 protocol at most; NCCL caps a ring's LL128 bus bandwidth
# at nChannels x the first (ncclTopoTuneModel: busBw = min(busBw * 0.92, nChannels * perChMaxRingLL128Bw))
# and a tree's at nChannels x the second (after its 120/128 or 7/9), since v2.19.3-1 (absent at v2.18.1-1;
# unchanged at v2.26.2-1 and v2.27.7-1, the #309 and B200 runs' versions)
PER_CHANNEL_MAX_RING_LL128_BW_GBPS = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                                      "hopper": (36.7, 36.7, 36.7), "blackwell": (40.0, 40.0, 40.0)}
PER_CHANNEL_MAX_TREE_LL128_BW_GBPS = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                                      "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}
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
NVLS_MAX_ARITY = 32
"""Most NVLS heads (``NCCL_MAX_NVLS_ARITY``, src/include/device.h@593de54e:206): NCCL's NVLS graph
search makes every GPU of the NVLink domain a head, up to this many (src/graph/search.cc@593de54e:1014,
and :1020 forces all of them inside one server: "pull evenly from all GPUs")."""
NVLS_CHUNK_STEPS = ((64, 64 * KiB), (8, 32 * KiB), (2, 16 * KiB))
"""NVLS (not NVLS tree) ``calcCollChunking``: the chunk drops to the floor while the message is
under factor x channels x heads x chunk (src/enqueue.cc@593de54e:2014-2016 = v2.27.7-1, the H200/B200
runs' version; the same three lines at 5067397:2272-2274)."""
# src/transport/nvls.cc@5067397 NVLS_NCHANNELS_SM90 / SM100 (across servers) / SM100_NVL (one server)
NVLS_CHANNELS = {"hopper": 16, "blackwell": 32}
NVLS_CHANNELS_ONE_SERVER = {"hopper": 16, "blackwell": 24}
NCCL_STEPS = 8  # src/include/device.h: FIFO slots per connection (chunks in flight)

ARCH_GENERATION = {"pascal": "volta", "volta": "volta", "turing": "volta", "ampere": "ampere", "ada": "ampere",
                   "hopper": "hopper", "blackwell": "blackwell", "cdna2": "cdna", "cdna3": "cdna"}
"""GPU architecture -> the row of NCCL's per-generation tables it falls in: NCCL indexes them
by the smallest compute capability, ``>= 100`` Blackwell, ``>= 90`` Hopper, ``>= 80`` Ampere
(Ada's 8.9 included), else Volta (src/graph/tuning.cc@5067397 ncclTopoTuneModel); AMD CDNA
GPUs run RCCL."""


def generation(gpu: str) -> str:
    """NCCL generation row of a GPU preset (``volta``, ``ampere``, ``hopper``, ``blackwell``, ``cdna``)."""
    preset = GPU_PRESETS.get(gpu)
    return ARCH_GENERATION.get(preset.architecture, "hopper") if preset is not None else "hopper"


class _Generations(dict):
    """``GENERATION[gpu]``: :func:`generation` of a GPU preset, read like the table it replaces."""

    def get(self, gpu, default=None):
        return generation(gpu) if gpu in GPU_PRESETS else default

    def __getitem__(self, gpu):
        return generation(gpu)


GENERATION = _Generations()
"""GPU preset -> NCCL generation row (see :func:`generation`)."""

# ROCm/rccl@0cbce2a7571c src/graph/tuning.cc: RCCL's own constants where they differ from NCCL's.
RCCL_BASE_LATENCY_US = {"tree": (12.0, 12.0, 17.0), "ring": (12.0, 12.0, 17.0)}
"""RCCL baseLat (LL, LL128, Simple), us."""
RCCL_XGMI_LATENCY_US = {"tree": (0.9, 0.0, 2.3), "ring": (0.8, 0.0, 2.1)}
"""RCCL tuning_model_5 (MI300X, rome_models.cc rome_model_79 ``tuning=5``) hwLat of its NVLINK
slot, which RCCL uses for xGMI: (LL, LL128, Simple), us."""

ALGO_ALIASES = {"hd": "halving_doubling", "nvlstree": "nvls_tree", "hier": "hierarchical"}


@frozen_dataclass
class NvlsTuning:
    """What NCCL's ``ncclNvlsTuning`` sets for a communicator (src/transport/nvls.cc@5067397)."""

    channels: int
    """NVLS channels (``comm->nvlsChannels``): the CTAs an NVLS or NVLS-tree collective runs on."""
    chunk_bytes: int
    """NVLS chunk before ``calcCollChunking`` shrinks it (``comm->nvlsChunkSize``)."""
    tree_max_chunk_bytes: int
    """Largest NVLS-tree chunk (``comm->nvlsTreeMaxChunkSize``)."""


def nvls_tuning(gen: str, n_nodes: int, nic_gbyte_per_s: float, gpus_per_node: int,
                nic_behind_gpu_switch: bool) -> NvlsTuning:
    """NCCL's NVLS channel count and chunk sizes for a communicator.

    Hopper: 16 channels, 128 KiB chunks, NVLS-tree chunks capped at 64 KiB from four servers.
    Blackwell: 24 channels inside one server, 32 across servers, and across servers a table
    by servers, GPUs per server (ppn) and NIC rate (``ncclNvlsTreeSm100Tuning``; NCCL's NIC
    rate is the line rate in GB/s). ``nic_behind_gpu_switch``: the path from a GPU to its NIC
    is at most PATH_PXB (a NIC per GPU behind the GPU's PCIe switch).
    """
    chunk = NVLS_CHUNK_BYTES
    tree_max = 0
    if gen == "blackwell":
        channels = NVLS_CHANNELS["blackwell"] if n_nodes > 1 else NVLS_CHANNELS_ONE_SERVER["blackwell"]
        if n_nodes > 1:
            ppn, bw = gpus_per_node, nic_gbyte_per_s
            if n_nodes == 2 and bw >= 48.0:
                channels, tree_max = 32, 128 * KiB
                if ppn <= 4:
                    chunk = tree_max = 256 * KiB
                elif ppn >= 16 or (ppn <= 8 and nic_behind_gpu_switch and bw < 96.0):
                    tree_max = 64 * KiB
            elif bw >= 96.0:
                if ppn <= 8:
                    channels, chunk, tree_max = 24, 256 * KiB, 256 * KiB
                else:
                    channels, tree_max = 32, (128 * KiB if ppn < 32 else 64 * KiB)
            elif bw >= 48.0:
                channels, tree_max = 24, (64 * KiB if nic_behind_gpu_switch else 128 * KiB)
    else:
        channels = NVLS_CHANNELS["hopper"]
    if tree_max == 0:
        tree_max = 64 * KiB if n_nodes >= 4 else chunk
    return NvlsTuning(channels=channels, chunk_bytes=chunk, tree_max_chunk_bytes=tree_max)


def nvls_tree_chunk_bytes(tuning: NvlsTuning, heads: int, size_bytes: float) -> float:
    """NVLS-tree chunk of a call (src/enqueue.cc@5067397 ``calcCollChunking``): concurrent ops =
    channels x heads (one per GPU of a server); the chunk, at most the tree cap, halves below
    32 / 16 / 4 / 1 x ops x chunk (floors 256 / 128 / 64 / 32 KiB)."""
    ops = tuning.channels * heads
    chunk = min(tuning.chunk_bytes, tuning.tree_max_chunk_bytes)
    for factor, floor in ((32, 256 * KiB), (16, 128 * KiB), (4, 64 * KiB), (1, 32 * KiB)):
        if size_bytes < factor * ops * chunk and chunk > floor:
            chunk = floor
    return min(chunk, max(1.0, size_bytes / ops))


def nvls_tree_chunk_breaks(tuning: NvlsTuning, heads: int) -> list[float]:
    """Sizes where :func:`nvls_tree_chunk_bytes` changes its chunk."""
    ops = tuning.channels * heads
    chunk = min(tuning.chunk_bytes, tuning.tree_max_chunk_bytes)
    out = []
    for factor, floor in ((32, 256 * KiB), (16, 128 * KiB), (4, 64 * KiB), (1, 32 * KiB)):
        if chunk > floor:
            out.append(float(factor * ops * chunk))
            chunk = floor
    return out


def nvls_chunk_bytes(tuning: NvlsTuning, heads: int, size_bytes: float) -> int:
    """NVLS chunk of a call (src/enqueue.cc@593de54e:2007-2016 ``calcCollChunking``): the NVLS chunk
    (128 KiB), halved to 64 / 32 / 16 KiB below 64 / 8 / 2 x concurrent ops x chunk, concurrent
    ops = NVLS channels x heads. Not the NVLS-tree rule (:func:`nvls_tree_chunk_bytes`: its own
    branch, :2018-2030, other factors and floors). The single-server case only: across servers
    NCCL caps the chunk at 32 KiB when NVLS bandwidth is under 150 GB/s, which dpsim never runs
    (NVLS across servers is its NVLS tree)."""
    ops = tuning.channels * heads
    chunk = tuning.chunk_bytes
    for factor, floor in NVLS_CHUNK_STEPS:
        if size_bytes < factor * ops * chunk and chunk > floor:
            chunk = floor
    return chunk


def nvls_chunk_breaks(tuning: NvlsTuning, heads: int) -> list[float]:
    """Sizes where :func:`nvls_chunk_bytes` changes its chunk."""
    ops = tuning.channels * heads
    chunk = tuning.chunk_bytes
    out = []
    for factor, floor in NVLS_CHUNK_STEPS:
        if chunk > floor:
            out.append(float(factor * ops * chunk))
            chunk = floor
    return out


def nvls_steps(tuning: NvlsTuning, heads: int, size_bytes: float) -> tuple[int, int]:
    """(steps, chunk bytes) of an NVLS call: each step a channel moves one chunk per head, so
    ``ceil(S / (channels x heads x chunk))`` steps (NCCL's loop over ``loopSize``)."""
    chunk = nvls_chunk_bytes(tuning, heads, size_bytes)
    return max(1, math.ceil(size_bytes / (tuning.channels * heads * chunk))), chunk


def nvls_available(spec) -> bool:
    """NVLink SHARP: NVSwitch servers of Hopper or later, unless ``node.nvls`` says otherwise."""
    if spec.node.nvls is not None:
        if spec.node.nvls and generation(spec.gpu) not in ("hopper", "blackwell"):
            # NCCL builds its NVLS kernels for __CUDA_ARCH__ >= 900 only (src/device/generate.py@5067397,
            # required_cuda): nvls: true on an A100 ran NVLS at a bus bandwidth above NVLink3's line rate.
            raise TopologyError(f"node.nvls: true in topology {spec.name!r} needs Hopper or later GPUs (NVLink "
                                f"SHARP; NCCL's NVLS kernels need compute capability 9.0), not {spec.gpu}; leave "
                                f"node.nvls out or set it false")
        return bool(spec.node.nvls) and spec.node.interconnect == "nvswitch"
    return spec.node.interconnect == "nvswitch" and generation(spec.gpu) in ("hopper", "blackwell")


def library(spec) -> str:
    """``nccl`` or ``rccl``: the file's ``node.collective_library``, else RCCL on AMD GPUs."""
    if spec.node.collective_library is not None:
        return spec.node.collective_library
    return "rccl" if generation(spec.gpu) == "cdna" else "nccl"


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
    inside = [t for t in names if t.startswith("^")]
    if inside:
        # `^ring,^tree` (two exclusions, as one would guess) was refused "'^tree' is not known", tree being known.
        # NCCL_ALGO/NCCL_PROTO read one '^' at the start as excluding every name in the list.
        fix = f"; give ^{','.join(t.lstrip('^') for t in names)}" if exclude and len(inside) == len(names) - 1 else ""
        raise ConfigError(f"{field_name}: {text!r} puts '^' before {inside[0].lstrip('^')!r}; '^' goes once, before "
                          f"the whole list, and excludes every name in it (as NCCL's variable reads it){fix}")
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


CALL_SCOPES = ("node", *("ib", "roce", "socket", "efa", "tcpx", "tcpxo"))
"""What a per-call overhead is fitted per: collectives inside one server (``node``), or the
transport kind of the NICs a collective crosses."""
RAMP_SCOPES = ("node", "network", "verbs", "nvls_tree", "staged", "tcpx")
"""What the bandwidth ramp is fitted per: rings and trees inside one NVLink domain (NVLS has
no ramp: its chunk steps, :attr:`NcclTuning.nvls_step_latency_us`, set its mid-size time; a server of
PCIe only takes ``network``'s, :func:`dpsim.collectives.fabric_facts._ramp_scope`), rings and trees across a
network whose NICs read and write GPU memory (512 KiB Simple chunks; ``verbs`` when NCCL's own
InfiniBand verbs transport drives them, IB or RoCE: the NIC RDMA-writes each chunk into the
peer's GPU memory, where EFA's plugin posts SRD messages through libfabric from the proxy
thread), NVLS tree across a
network (32-128 KiB chunks, ``calcCollChunking``, whose flow-control window
:attr:`NcclTuning.nvls_tree_rtt_scale` also scales), or rings and trees across the socket
transport with helper threads (``staged``: each chunk also crosses PCIe to host memory, a size
exchange on the control socket and the hand-off of its 64 KiB+ tasks to helper threads, more
pipeline stages to fill than a GPUDirect path's; RDMA without GPUDirect has no such stages, the
NIC reads the host buffer the GPU wrote, and ramps as ``verbs``, and so does the socket
transport's default of one socket that the proxy thread drives itself,
:func:`dpsim.collectives.fabric_facts._ramp_scope`), or rings and trees over Google's
GPUDirect-TCPX/TCPXO (TCP into GPU memory: receive buffers handed out by Google's
receive-datapath daemon, ``tcpgpudmarxd`` / RxDM, and the FasTrak plugin's own flows, not a
verbs NIC's RDMA writes; GoogleCloudPlatform/container-engine-accelerators
``gpudirect-tcpxo/nccl-test-latest.yaml`` runs that daemon beside every NCCL job)."""


@frozen_dataclass
class NcclTuning:
    """Software constants of the model that are *fitted* on measurements, not read from NCCL's source.

    ``validation/accuracy_collectives.py --fit`` fits them on the reference rows
    (``tests/data/collectives_reference.csv``) and, for the accuracy it reports, refits them
    leaving each system out (nothing fitted on the system being predicted).
    """

    nvls_tree_rtt_scale: float = 1.0
    """Round trip of an NVLS-tree chunk slot, as a multiple of NCCL's NVLS + NVLSTree hop
    latencies (25 + 20.9 us on Hopper). 1.0 = NCCL's own latencies."""
    call_overhead_us: tuple[tuple[str, float], ...] = ()
    """Per-call host overhead beyond NCCL's modelled latency (kernel launch, proxy, plugin), us,
    by scope (:data:`CALL_SCOPES`): what a topology without ``launch_overhead_us`` gets."""
    ramp_half_bytes: tuple[tuple[str, float], ...] = ()
    """Message size at which the size-dependent part runs at half its bandwidth, by scope
    (:data:`RAMP_SCOPES`); 0: no ramp."""
    ramp_exponent: float = 1.0
    """How fast the ramp closes: the bandwidth is ``B / (1 + (half / S) ** exponent)``."""
    nvls_step_latency_us: float = 0.0
    """NVLS (one NVLink domain): fixed time of one chunk step of a channel, us (a ``multimem``
    reduce-and-multicast round through the switch and the step's flag handshake)."""
    nvls_channel_bytes_per_s: float = 0.0
    """NVLS: bytes per second one channel (one CTA) moves through the switch within a step, all
    heads' chunks counted; 0: no chunk-step term (the NVLS time is its bandwidth bound)."""

    def call_overhead_s(self, scope: str) -> float:
        """Per-call overhead of ``scope``, seconds (0 when not fitted)."""
        return dict(self.call_overhead_us).get(scope, 0.0) * 1e-6

    def ramp(self, scope: str, size_bytes: float) -> float:
        """Fraction of the size-dependent bandwidth a message of ``size_bytes`` reaches in ``scope``."""
        half = dict(self.ramp_half_bytes).get(scope, 0.0)
        if half <= 0 or size_bytes <= 0:
            return 1.0
        return 1.0 / (1.0 + (half / size_bytes) ** self.ramp_exponent)

    def nvls_step_s(self, step_bytes: float) -> float:
        """One NVLS chunk step of a channel moving ``step_bytes`` through the switch, seconds
        (0 when the step constants are not fitted)."""
        if self.nvls_channel_bytes_per_s <= 0:
            return 0.0
        return self.nvls_step_latency_us * 1e-6 + step_bytes / self.nvls_channel_bytes_per_s


FITTED_TUNING = NcclTuning(
    nvls_tree_rtt_scale=1.0,
    call_overhead_us=(("node", 28.2), ("ib", 0.0), ("roce", 0.0), ("socket", 48.8), ("efa", 56.4),
                      ("tcpx", 48.8), ("tcpxo", 41.1)),
    ramp_half_bytes=(("node", 64.0 * 2**20), ("network", 2.0 * 2**20), ("verbs", 0.0),
                     ("nvls_tree", 32.0 * 2**20), ("staged", 4.0 * 2**20), ("tcpx", 32.0 * 2**20)),
    ramp_exponent=0.5,
    nvls_step_latency_us=5.5,
    nvls_channel_bytes_per_s=20e9,
)
"""The default, fitted on every reference system (``tests/data/collectives_reference.csv``) by
``python validation/accuracy_collectives.py --fit``, which prints it (the accuracy it reports
refits it leaving each system out): per-call overheads on each system's smallest-message row
below 1 MiB (``node``: median of the single-server systems; ``ib``: median of two A100 nodes on
HDR, NVIDIA/nccl-tests#150, 19.9 us at 8 B, and the two and four XE9680 H100 nodes of
NVIDIA/nccl-tests#309, whose 16 B rows sit 1 us under NCCL's own latency: a median of -0.9 us,
held at 0 since a host overhead cannot be negative; ``efa``: AWS
p4de/p5/p6; ``tcpxo``: GCP A3 Mega); kinds
without a reference system with such a row take their transport family's (``roce``: the
verbs transport ``ib`` runs; ``socket``, ``tcpx``: the host-driven kinds EFA and TCPXO), an
assumption; the
ramp, the NVLS chunk step (fitted on the single H200 and B200 servers, the systems that run NVLS
inside one server) and the NVLS-tree round trip on the rows of 1 MiB and more (``tests/test_accuracy_nccl.py``
checks the fit reproduces these values)."""


def check_job_flags(jobs: int, placement: str) -> None:
    """Validate ``--jobs`` and ``--placement``."""
    if not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs: {jobs} is not valid; expected an integer >= 1")
    if placement not in PLACEMENTS:
        raise ConfigError(f"--placement: {placement!r} is not valid; choose packed or interleaved")
