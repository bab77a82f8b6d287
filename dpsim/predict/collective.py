"""One collective over an nccl-tests-style size sweep, on the cluster and model a prediction uses.

:func:`predict_collective` is ``dpsim collective`` as a function (the command parses the sizes and
prints the :class:`CollectiveReport` as nccl-tests would): the communicator is the job's world,
costed by :func:`~dpsim.predict.run.build_collectives` (NCCL's choice, or a calibration profile's
fits, with the profile's defaults: :mod:`dpsim.predict.resolve`).
"""

from __future__ import annotations

import math
from typing import Any

from dpsim.api_args import checked_arguments
from dpsim.collectives.ops import OPS, CollectiveResult
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_COLLECTIVE_BYTES, MAX_SIZE_ROWS, is_finite, plain_number, short
from dpsim.predict.config import SETTINGS, PredictConfig
from dpsim.predict.resolve import resolve
from dpsim.predict.run import build_collectives, resolve_topology
from dpsim.wording import canonical_choice

TYPE_BYTES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1}
"""nccl-tests' ``-d`` data types and their sizes in bytes."""


@frozen_dataclass
class CollectiveReport:
    """A collective's time at each size of a sweep (schema ``dpsim.collective/1``)."""

    config: PredictConfig
    """The cluster and collective model asked for (resolved)."""
    op: str
    """The collective: all_reduce, reduce_scatter, all_gather or broadcast."""
    n_ranks: int
    """Ranks of the communicator."""
    n_nodes: int
    """Nodes they span."""
    topology: str
    """The topology's name."""
    dtype: str
    """nccl-tests' data type (sets the element count of each size)."""
    profile: str | None
    """The calibration profile's name whose fits cost it (``None``: NCCL's choice on the flow model)."""
    results: tuple[CollectiveResult, ...]
    """One per size, in increasing size."""

    def to_dict(self) -> dict[str, Any]:
        """``dpsim collective --json``."""
        elem = TYPE_BYTES[self.dtype]
        calibration = self.config.calibration.profile
        return {
            "schema": "dpsim.collective/1", "op": self.op, "n_ranks": self.n_ranks, "topology": self.topology,
            "dtype": self.dtype, "algorithm": "nccl" if calibration is None else "calibrated",
            "calibration": calibration,
            "rows": [{"size_bytes": int(r.size_bytes), "count": int(r.size_bytes) // elem, "time_s": r.time_s,
                      "algbw_bytes_per_s": r.algbw_bytes_per_s, "busbw_bytes_per_s": r.busbw_bytes_per_s,
                      "algorithm": r.algorithm, "protocol": r.protocol}
                     for r in self.results],
        }


def check_sizes(minbytes: Any, maxbytes: Any, stepfactor: Any, *, max_bytes: float = MAX_COLLECTIVE_BYTES,
                flags: tuple[str, str, str] = ("-b/--minbytes", "-e/--maxbytes", "-f/--stepfactor")) -> int:
    """The rows of an nccl-tests-style size sweep, its numbers checked (``dpsim collective`` and
    ``dpsim calibrate`` after parsing their -b/-e/-f, :func:`predict_collective` from Python):
    ``1 <= minbytes <= maxbytes <= max_bytes``, a factor > 1 (``minbytes=0`` or a factor of 1 looped
    forever) and at most :data:`~dpsim.limits.MAX_SIZE_ROWS` rows."""
    b_flag, e_flag, f_flag = flags
    for flag, value in ((b_flag, minbytes), (e_flag, maxbytes)):
        if not is_finite(value) or isinstance(value, bool) or not 0 < value <= max_bytes:
            raise ConfigError(f"{flag}: {short(value)} is not valid; expected a number of bytes from 1 to "
                              f"{max_bytes:.0f}")
    if minbytes < 1 or maxbytes < minbytes:
        raise ConfigError(f"{b_flag.split('/')[0]}/{e_flag.split('/')[0]}: {short(minbytes)}..{short(maxbytes)} is "
                          f"not a valid range; need 1 byte <= minbytes <= maxbytes")
    if not is_finite(stepfactor) or isinstance(stepfactor, bool) or not stepfactor > 1:
        raise ConfigError(f"{f_flag}: {short(stepfactor)} is not valid; expected a number > 1")
    rows = math.floor(math.log(maxbytes * (1 + 1e-12) / minbytes) / math.log(stepfactor)) + 1
    if rows > MAX_SIZE_ROWS:
        raise ConfigError(f"{f_flag}: {stepfactor:.10g} from {minbytes:g} to {maxbytes:g} bytes makes "
                          f"{rows:,} rows; expected at most {MAX_SIZE_ROWS:,} (use a larger factor)")
    return rows


@checked_arguments("dpsim.predict_collective", config_settings=SETTINGS)
def predict_collective(config: PredictConfig, *, op: str = "all_reduce", minbytes: float = 8,
                       maxbytes: float = 2**30, stepfactor: float = 2.0, dtype: str = "float") -> CollectiveReport:
    """``op`` on ``config``'s world communicator at sizes ``minbytes`` x ``stepfactor``^k up to
    ``maxbytes``, each rounded down to whole elements of ``dtype`` (and whole ranks' shares for
    reduce_scatter and all_gather), as nccl-tests does, but never below one element (one per rank for
    reduce_scatter and all_gather): a smaller size is rounded *up* to that, so the first results of a sweep
    that starts below it repeat one size (one result per requested size is kept; the nccl-tests table prints
    each size once)."""
    op, dtype = canonical_choice(op, OPS), canonical_choice(dtype, TYPE_BYTES)
    if not isinstance(op, str) or op not in OPS:
        raise ConfigError(f"--op: {short(op)} is not a collective; choose one of {', '.join(OPS)}")
    if not isinstance(dtype, str) or dtype not in TYPE_BYTES:  # (a list: unhashable, a TypeError)
        raise ConfigError(f"-d/--datatype: {short(dtype)} is not known; choose one of {', '.join(TYPE_BYTES)}")
    # numpy's scalars as Python's numbers, as PredictConfig takes them (minbytes=np.int64(8) was refused).
    minbytes, maxbytes, stepfactor = (plain_number(v, float) for v in (minbytes, maxbytes, stepfactor))
    check_sizes(minbytes, maxbytes, stepfactor)
    resolved = resolve(config)
    topology = resolve_topology(resolved.config)
    # The same collective model predict costs the job's world communicator with.
    model = build_collectives(resolved.config, topology, profile=resolved.profile).world
    elem = TYPE_BYTES[dtype]
    sizes = []
    size = minbytes
    while size <= maxbytes * (1 + 1e-12):
        align = elem * (config.cluster.gpus if op in ("reduce_scatter", "all_gather") else 1)
        sizes.append(max(align, int(size) // align * align))
        size *= stepfactor
    return CollectiveReport(config=resolved.config, op=op, n_ranks=topology.n_gpus, n_nodes=topology.n_nodes,
                            topology=topology.spec.name, dtype=dtype,
                            profile=None if resolved.profile is None else resolved.profile.name,
                            results=tuple(model.time(op, s) for s in sizes))
