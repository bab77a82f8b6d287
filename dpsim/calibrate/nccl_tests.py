"""Parse ordinary nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ...).

nccl-tests (https://github.com/NVIDIA/nccl-tests) prints a header, the devices it runs
on, then one row per size::

    # nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 ...
    #
    # Using devices
    #  Rank  0 Group  0 Pid  12345 on   node-a device  0 [0x07] NVIDIA A100-SXM4-80GB
    ...
    #                                                              out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
               8             2     float     sum      -1    36.35    0.00    0.00      0    35.05    0.00    0.00      0
    # Avg bus bandwidth    : 64.0883

Columns are read by name from the header row, so older layouts (no ``root``/``redop``
column, ``error`` instead of ``#wrong``, no in-place half) parse too. The out-of-place
time is the measurement (the in-place half, when present, is ignored).

Which collective
    From a ``# Collective test starting: all_reduce_perf`` line, else an ``*_perf``
    command line in the log, else the file name (``all_reduce_perf.log``,
    ``my-allgather.txt``...).
Ranks and nodes
    Ranks are the ``#  Rank  N ...`` device lines and nodes their distinct host names.
    Without a device list (trimmed logs), ranks come from ``busbw/algbw`` of the
    largest row (``2(N-1)/N`` for all-reduce, ``(N-1)/N`` for gather/scatter) and nodes
    need ``ranks_per_node``.

Every problem raises one :class:`~dpsim.errors.ProfileError` naming the file, line and
what was expected.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from dpsim import wording
from dpsim.errors import ProfileError
from dpsim.files import path_kind, read_text_capped
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_COLLECTIVE_BYTES, MAX_SINGLE_GPU_STEP_S
from dpsim.profile.schema import Measurement

PERF_BINARIES = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
    "broadcast_perf": "broadcast",
    "sendrecv_perf": "sendrecv",
}
"""nccl-tests binaries dpsim reads, and the op each measures."""

_NAME_HINTS = (
    ("reduce_scatter", ("reduce_scatter", "reducescatter", "reduce-scatter")),
    ("all_reduce", ("all_reduce", "allreduce", "all-reduce")),
    ("all_gather", ("all_gather", "allgather", "all-gather")),
    ("broadcast", ("broadcast", "bcast")),
    ("sendrecv", ("sendrecv", "send_recv", "p2p")),
)
_ELEMENT_BYTES = {"int8": 1, "uint8": 1, "char": 1, "half": 2, "float16": 2, "bfloat16": 2, "fp8_e4m3": 1,
                  "fp8_e5m2": 1, "float": 4, "float32": 4, "int32": 4, "int": 4, "uint32": 4,
                  "double": 8, "float64": 8, "int64": 8, "uint64": 8}
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                        r"(?:\[[^\]]*\]\s*)?(.*)$")
_ROW = re.compile(r"^\d+\s+\d+\s")
_STARTING = re.compile(r"Collective test starting:\s*(\w+)")


@frozen_dataclass
class NcclTestsLog:
    """One parsed nccl-tests run."""

    path: str
    """File it came from."""
    op: str
    """dpsim op name (``all_reduce``...)."""
    n_ranks: int
    """Ranks in the communicator."""
    n_nodes: int
    """Hosts."""
    dtype: str
    """nccl-tests data type of the rows."""
    measurements: tuple[Measurement, ...]
    """Out-of-place times per size (``source`` = file:line)."""
    device_names: tuple[str, ...] = ()
    """Distinct device names from the device list."""
    hosts: tuple[str, ...] = ()
    """Distinct host names from the device list."""
    header: str = ""
    """The ``# nThread ...`` line, if present."""
    sources: tuple[str, ...] = ()
    """``# source:`` comment lines (citations) found in the log."""


MIN_LOG_TIME_US = 0.01
"""The smallest positive time a nccl-tests log holds: it prints times under 100 us with ``%7.2f``
(NVIDIA/nccl-tests src/common.cu, the ``timeStr`` formats of its result rows)."""
MAX_LOG_TIME_US = MAX_SINGLE_GPU_STEP_S * 1e6
"""A day, the longest time a profile's measurement may hold (:mod:`dpsim.profile.io`)."""


def _fail(path: str, line: int | None, message: str) -> ProfileError:
    where = f"{path} line {line}" if line else path
    return ProfileError(f"--from-nccl-tests: {where}: {message}")


def _detect_op(path: str, lines: list[str]) -> str | None:
    for line in lines:
        m = _STARTING.search(line)
        if m and m.group(1) in PERF_BINARIES:
            return PERF_BINARIES[m.group(1)]
    for line in lines:
        for binary, op in PERF_BINARIES.items():
            if re.search(rf"(^|[\s/]){binary}(\s|$)", line):
                return op
    name = Path(path).name.lower()
    for op, hints in _NAME_HINTS:
        if any(h in name for h in hints):
            return op
    return None


def _bus_factor(op: str, n_ranks: int) -> float | None:
    """busbw / algbw nccl-tests prints for ``op`` on ``n_ranks`` (its ``*BusBw`` functions); ``None``: 1 or unknown."""
    if op == "all_reduce":
        return 2 * (n_ranks - 1) / n_ranks
    if op in ("all_gather", "reduce_scatter"):
        return (n_ranks - 1) / n_ranks
    return None


BW_PRINT_STEP = 0.01
"""nccl-tests prints algbw and busbw in GB/s with two decimals (``%6.2f``, NVIDIA/nccl-tests src/common.cu, the
result row's format), so each is within half this of what it measured."""


def _check_ranks_against_busbw(path: str, op: str, n_ranks: int, best: tuple[float, float, int] | None) -> None:
    """Refuse a device list whose rank count the log's own busbw/algbw ratio contradicts (a list cut short:
    the last ``# Rank`` line lost), judged on the row of the largest algbw within the columns' print rounding.
    A 7-rank list of an 8-rank all-reduce (1.7143 against 1.75) is caught; 63 of 64 (1.9688 against 1.9688)
    is inside the rounding and is not."""
    factor = _bus_factor(op, n_ranks)
    if factor is None or best is None:
        return
    algbw, busbw, no = best
    half = BW_PRINT_STEP / 2
    if algbw <= half:
        return
    low, high = max(busbw - half, 0.0) / (algbw + half), (busbw + half) / (algbw - half)
    if low * (1 - 1e-9) <= factor <= high * (1 + 1e-9):
        return
    implied = _ranks_from_ratio(op, busbw / algbw)
    if implied is None:
        return  # a ratio no rank count gives (a hand-made or relabelled table): nothing to say which is right
    raise _fail(path, no, f"busbw {busbw:g} / algbw {algbw:g} = {busbw / algbw:.4f} gives {implied} ranks, but the "
                          f"device list has {wording.count(n_ranks, 'rank')} ({factor:.4f} for {op}); keep every "
                          "'#  Rank N ...' line nccl-tests prints")


def _ranks_from_ratio(op: str, ratio: float) -> int | None:
    """N from busbw/algbw: 2(N-1)/N for all-reduce, (N-1)/N for gather/scatter."""
    if op == "all_reduce" and 1.0 <= ratio < 2.0:
        return round(2 / (2 - ratio))
    if op in ("all_gather", "reduce_scatter") and 0.5 <= ratio < 1.0:
        return round(1 / (1 - ratio))
    return None


def parse_nccl_tests(path: str | Path, *, ranks_per_node: int | None = None, text: str | None = None) -> NcclTestsLog:
    """Parse one nccl-tests log file.

    Parameters
    ----------
    path : str or Path
        The log (also used in messages).
    ranks_per_node : int, optional
        GPUs per node, needed only when the log has no ``# Using devices`` list.
    text : str, optional
        The log's contents, if already read.
    """
    path = str(path)
    if text is None:
        if not path.strip():  # "--from-nccl-tests: : does not exist"
            raise ProfileError(f"--from-nccl-tests: {path!r} is not a file name; give the path of an nccl-tests log")
        if path_kind(path, "--from-nccl-tests", ProfileError) is None:
            raise _fail(path, None, "does not exist")
        # capped and regular files only: /dev/zero or a FIFO would otherwise be read until memory runs out
        text = read_text_capped(path, "--from-nccl-tests", ProfileError, what="nccl-tests log file")
    lines = text.splitlines()
    op = _detect_op(path, lines)
    other = next(((i, m.group(1)) for i, line in enumerate(lines, 1) if (m := _STARTING.search(line))
                  and m.group(1) not in PERF_BINARIES), None)
    if other is not None:
        # nccl-tests' own line names the binary: an alltoall_perf or gather_perf log was told to keep the line it
        # kept ("cannot tell which collective this log measured"), or, named like all_reduce, read as all_reduce.
        raise _fail(path, other[0], f"the log is of {other[1]} (its 'Collective test starting' line), a "
                    f"collective dpsim's profiles do not hold; give logs of {', '.join(PERF_BINARIES)}")
    if op is None:
        raise _fail(path, None, "cannot tell which collective this log measured; keep nccl-tests' "
                    "'# Collective test starting: all_reduce_perf' line or name the file after the "
                    "binary (e.g. all_reduce_perf.log)")
    header_line = next((l.strip() for l in lines if l.lstrip("# ").startswith("nThread")), "")
    sources = tuple(l.split("source:", 1)[1].strip() for l in lines if l.startswith("#") and "source:" in l)
    ranks: dict[int, tuple[str, str]] = {}
    for line in lines:
        m = _RANK_LINE.match(line.strip())
        if m:
            ranks[int(m.group(1))] = (m.group(2), m.group(4).strip())
    columns: list[str] | None = None
    header_no = 0
    rows: list[tuple[int, list[str]]] = []
    for no, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            tokens = stripped.lstrip("#").split()
            if tokens[:2] == ["size", "count"]:
                columns, header_no = tokens, no
                rows = []
            elif columns is not None and rows and stripped.startswith("# Avg bus bandwidth"):
                break
            continue
        if columns is None or not _ROW.match(stripped):
            continue  # blank lines, NCCL INFO/WARN lines, anything that is not a result row
        rows.append((no, stripped.split()))
    if columns is None:
        raise _fail(path, None, "no nccl-tests result table found (expected a '#  size  count  type ...' "
                    "header row followed by one row per size)")
    if not rows:
        raise _fail(path, header_no, "the result table has no rows")
    try:
        i_size, i_count, i_type = columns.index("size"), columns.index("count"), columns.index("type")
        i_time = columns.index("time")
        i_algbw = columns.index("algbw")
        i_busbw = columns.index("busbw")
    except ValueError as exc:
        raise _fail(path, header_no, f"table header lacks a column ({exc}); expected size, count, type, "
                    "time, algbw, busbw") from None
    measurements = []
    dtype = None
    last_ratio = None
    best_bw: tuple[float, float, int] | None = None  # the row of the largest algbw: its ratio is the least rounded
    for no, tok in rows:
        if len(tok) != len(columns):
            raise _fail(path, no, f"{len(tok)} columns where the header has {len(columns)} "
                        f"({' '.join(columns)}): {' '.join(tok)[:80]!r}")
        try:
            size = float(tok[i_size])
            count = float(tok[i_count])
            time_us = float(tok[i_time])
            algbw, busbw = float(tok[i_algbw]), float(tok[i_busbw])
        except ValueError:
            raise _fail(path, no, f"expected numbers in the size, count, time, algbw and busbw "
                        f"columns: {' '.join(tok)[:80]!r}") from None
        dtype = dtype or tok[i_type]
        if tok[i_type] != dtype:
            raise _fail(path, no, f"type {tok[i_type]!r} differs from the first row's {dtype!r}")
        elem = _ELEMENT_BYTES.get(dtype)
        if elem is not None and count > 0 and count * elem != size and op not in (
                "all_gather", "reduce_scatter"):
            raise _fail(path, no, f"size {size:.0f} B is not count {count:.0f} x {elem} B ({dtype})")
        if size == 0:
            continue  # nccl-tests prints size 0 rows for tiny sweeps; they carry no information
        # float() reads "nan" and "inf" too: refused here, naming the line, not later by the fit
        # (which named neither the flag nor the line, and showed numpy's reprs).
        if not (size > 0 and math.isfinite(size)):
            raise _fail(path, no, f"size {tok[i_size]} B is not a positive number")
        if size > MAX_COLLECTIVE_BYTES:
            # As a time out of range: named by its line, not later as a field of the profile being written.
            raise _fail(path, no, f"size {tok[i_size]} B is not valid; dpsim takes at most "
                                  f"{MAX_COLLECTIVE_BYTES:,.0f} B (1 TiB)")
        if not (time_us > 0 and math.isfinite(time_us)):
            raise _fail(path, no, f"time {tok[i_time]} us is not a positive number")
        if not MIN_LOG_TIME_US <= time_us <= MAX_LOG_TIME_US:
            # 1e-300 us reached the fit as a LinAlgError traceback; 1e308 us a schema error without the line.
            raise _fail(path, no, f"time {tok[i_time]} us is not valid; nccl-tests prints from {MIN_LOG_TIME_US:g} us "
                                  f"(two decimals) and dpsim takes at most {MAX_LOG_TIME_US:g} us (a day)")
        if algbw > 0 and math.isfinite(algbw) and math.isfinite(busbw) and (best_bw is None or algbw > best_bw[0]):
            best_bw = (algbw, busbw, no)
            last_ratio = busbw / algbw
        measurements.append(Measurement(size_bytes=size, time_s=time_us * 1e-6, source=f"{Path(path).name}:{no}"))
    if len({m.size_bytes for m in measurements}) < 2:
        raise _fail(path, header_no, f"{len(measurements)} usable row(s); a fit needs at least 2 sizes")
    hosts = tuple(dict.fromkeys(h for h, _ in (ranks[r] for r in sorted(ranks))))
    devices = tuple(dict.fromkeys(d for _, d in (ranks[r] for r in sorted(ranks)) if d))
    if ranks:
        n_ranks = len(ranks)
        if sorted(ranks) != list(range(n_ranks)):
            # A device list cut or edited (rank 3 missing) counted the ranks it kept: a profile of 7 ranks from a
            # run of 8, with a bus bandwidth the log's own busbw column contradicts.
            missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
            raise _fail(path, None, f"the device list numbers {wording.count(n_ranks, 'rank')} but lacks rank(s) "
                                    f"{', '.join(map(str, missing[:8]))}; keep every '#  Rank N ...' line "
                                    "nccl-tests prints")
        _check_ranks_against_busbw(path, op, n_ranks, best_bw)
        n_nodes = len(hosts)  # the device list is authoritative; --ranks-per-node is not needed
        per_host = [sum(1 for h, _ in ranks.values() if h == host) for host in hosts]
        counts = ", ".join(str(k) for k in dict.fromkeys(per_host))
        layout = f"{wording.count(n_ranks, 'rank')} on {wording.count(n_nodes, 'host')}, {counts} per host"
        if ranks_per_node is not None:
            # ... and one that contradicts it was silently dropped (--ranks-per-node 3 on 2 hosts of 8).
            if any(k != ranks_per_node for k in per_host):
                raise _fail(path, None, f"--ranks-per-node {ranks_per_node} contradicts the log's device list "
                                        f"({layout}); leave --ranks-per-node out, the list gives the nodes")
        if len(set(per_host)) > 1:  # a profile's communicator has n_ranks / n_nodes ranks on every node
            raise _fail(path, None, f"the device list has {layout}; dpsim takes runs with the same number of "
                                    "ranks on every host")
    else:
        n_ranks = _ranks_from_ratio(op, last_ratio) if last_ratio else None
        if n_ranks is None:
            raise _fail(path, None, "no '# Using devices' list and the busbw/algbw ratio does not give the "
                        "number of ranks; keep the device list nccl-tests prints")
        if ranks_per_node is None:
            raise _fail(path, None, f"no '# Using devices' list, so the number of nodes of these {n_ranks} "
                        "ranks is unknown; pass --ranks-per-node")
        if n_ranks % ranks_per_node:
            raise _fail(path, None, f"--ranks-per-node {ranks_per_node} does not divide the {n_ranks} ranks")
        n_nodes = n_ranks // ranks_per_node
    if n_ranks < 2:
        raise _fail(path, None, f"{n_ranks} rank; a collective profile needs at least 2")
    return NcclTestsLog(path=path, op=op, n_ranks=n_ranks, n_nodes=n_nodes, dtype=dtype or "float",
                        measurements=tuple(measurements), device_names=devices, hosts=hosts,
                        header=header_line, sources=sources)
