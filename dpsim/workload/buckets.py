"""PyTorch DDP gradient buckets, reproduced exactly.

DDP does not all-reduce gradients one tensor at a time: it packs them into *buckets*
and launches one all-reduce per bucket as soon as every gradient in it is ready. This
module reproduces the **steady-state** buckets of ``DistributedDataParallel`` (torch
2.13), i.e. the buckets the C++ ``Reducer`` rebuilds after the first iteration and
keeps for the rest of training.

What torch does (read from the installed sources and checked against real DDP runs
in ``tests/test_buckets.py``):

* ``torch/nn/parallel/distributed.py``, ``_BucketCapacityConfig.create``: the cap is
  ``int(bucket_cap_mb * 1024 * 1024)`` bytes (MiB, truncated to an integer); when the
  user passes no ``bucket_cap_mb`` the cap is 25 MiB and the *first* bucket is capped
  at ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB); with an explicit
  ``bucket_cap_mb`` the first-bucket cap equals the cap.
* ``_BucketCapacityConfig.compute_bucket_size_limits`` / ``_ddp_init_helper``: with
  ``find_unused_parameters=False`` (the default) or ``static_graph=True``, iteration 0
  uses a single bucket (limit ``sys.maxsize``); the Reducer then rebuilds the buckets
  once, before the forward of the second iteration (``Reducer::rebuild_buckets`` in
  ``torch/csrc/distributed/c10d/reducer.cpp``), from the order in which the gradients
  actually became ready in the first backward, with the size limits
  ``[first_bucket_bytes_cap, bucket_bytes_cap]``.
* ``compute_bucket_assignment_by_size`` (same C++ file, ``dist._compute_bucket_
  assignment_by_size`` from Python), walking the parameters in that order:

  - one open bucket per dtype (and device); a parameter joins the open bucket of its
    dtype, so buckets never mix dtypes;
  - the parameter is added *first*, then the bucket is closed if its size is
    ``>=`` the current limit. A bucket therefore may exceed the cap, and a parameter
    larger than the cap does *not* simply get a bucket of its own: it closes the open
    bucket of its dtype *together with the smaller parameters already in it*, and is
    alone only when that bucket was empty;
  - each dtype has its own position in the list of limits: its first closed bucket
    uses the first limit, every later one the second (the last limit repeats);
  - closed buckets come out in the order they were closed; then the still-open,
    partially filled buckets are appended, one per dtype, in *reverse* order of
    the first appearance of their dtype (libstdc++ ``unordered_map`` iteration
    order; exact for two dtypes by construction of that container and verified
    empirically on CPU for every ordering of up to four float dtypes);
  - on rebuild the result is *not* re-sorted: bucket ``i`` is launched ``i``-th.

The gradient-ready order is the model's :attr:`~dpsim.workload.spec.ModelSpec.grad_ready_params`
(layers in reverse execution order, each layer's parameters in the order autograd
hands over their gradients). For every catalog family (GPT-2, Llama, BERT, ViT,
ResNet) it is exact: ``tests/test_buckets.py`` checks it, and the rebuilt buckets'
sizes and membership, against real DDP at several caps. For other models it is as
good as the ``ModelSpec`` says; :func:`assign_buckets` takes any observed order.

Not modelled: ``bucket_cap_mb_list`` (per-bucket caps), parameters with sparse
gradients (each gets its own bucket in torch), parameters with
``requires_grad=False`` (DDP skips them: leave them out of the model),
``find_unused_parameters=True`` without ``static_graph`` (torch never rebuilds then),
and the ``DDP_SET_LAST_BUCKET_CAP=1`` environment switch (small bucket last).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.units import MiB
from dpsim.workload.spec import ModelSpec, ParamSpec

DEFAULT_BUCKET_CAP_MB = 25
"""PyTorch's default ``bucket_cap_mb`` (``_DEFAULT_BUCKET_CAP_MB``), in MiB."""

DEFAULT_BUCKET_CAP_BYTES = DEFAULT_BUCKET_CAP_MB * MiB
"""PyTorch's default bucket cap in bytes (25 MiB)."""

DEFAULT_FIRST_BUCKET_BYTES = 1 * MiB
"""``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``: first-bucket cap when the user
passes no ``bucket_cap_mb``."""


@frozen_dataclass
class Bucket:
    """One DDP gradient bucket: the gradients reduced by one all-reduce."""

    index: int
    """Position in launch order (0 = first all-reduce of the backward pass)."""
    param_names: tuple[str, ...]
    """Names of the parameters in the bucket, in gradient-ready order."""
    size_bytes: int
    """Bytes of the bucket's flat gradient buffer (sum of its gradients' bytes)."""
    dtype: str
    """Dtype shared by every gradient in the bucket (DDP never mixes dtypes)."""
    size_limit_bytes: int
    """The size limit in force for this bucket when it was formed (torch's
    ``per_bucket_size_limits``): the first-bucket cap or the cap."""

    @property
    def num_params(self) -> int:
        """Number of parameter tensors in the bucket."""
        return len(self.param_names)


@frozen_dataclass
class BucketPlan:
    """DDP's steady-state bucket assignment for one replica."""

    buckets: tuple[Bucket, ...]
    """Buckets in launch order."""
    bucket_cap_bytes: int
    """Cap of every bucket but each dtype's first, in bytes (``bucket_cap_mb`` × 2**20)."""
    first_bucket_cap_bytes: int
    """Cap of each dtype's first bucket, in bytes (1 MiB by default, else the cap)."""

    @property
    def num_buckets(self) -> int:
        """Number of buckets (= all-reduces per step)."""
        return len(self.buckets)

    @property
    def total_size_bytes(self) -> int:
        """Bytes all-reduced per step: the sum of all bucket sizes."""
        return sum(b.size_bytes for b in self.buckets)

    def bucket_index_by_param(self) -> dict[str, int]:
        """Map each parameter name to the index of the bucket that holds it."""
        return {name: b.index for b in self.buckets for name in b.param_names}


def bucket_caps_bytes(bucket_cap_mb: float | None = None) -> tuple[int, int]:
    """``(first_bucket_cap_bytes, bucket_cap_bytes)`` as DDP derives them.

    ``None`` is PyTorch's default: 25 MiB with a 1 MiB first bucket. An explicit
    value ``x`` gives ``int(x * 2**20)`` bytes for both (as
    ``_BucketCapacityConfig.create`` does). Raises :class:`ConfigError` unless
    ``bucket_cap_mb`` is ``None`` or a finite number > 0.
    """
    if bucket_cap_mb is None:
        return DEFAULT_FIRST_BUCKET_BYTES, DEFAULT_BUCKET_CAP_BYTES
    if (
        isinstance(bucket_cap_mb, bool)
        or not isinstance(bucket_cap_mb, numbers.Real)
        or not math.isfinite(bucket_cap_mb)
        or bucket_cap_mb <= 0
    ):
        raise ConfigError(
            f"--bucket-cap-mb: {bucket_cap_mb!r} is not valid; allowed: a finite "
            f"number of MiB > 0 (e.g. 25), or leave it unset for PyTorch's default "
            f"of {DEFAULT_BUCKET_CAP_MB} MiB with a 1 MiB first bucket"
        )
    cap_bytes = int(bucket_cap_mb * MiB)
    return cap_bytes, cap_bytes


class _OpenBucket:
    __slots__ = ("names", "size_bytes", "limit_pos")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.size_bytes = 0
        self.limit_pos = 0


def assign_buckets(
    params_in_ready_order: Sequence[ParamSpec], *, bucket_cap_mb: float | None = None
) -> BucketPlan:
    """DDP's steady-state (rebuilt) buckets for parameters given in gradient-ready order.

    Reproduces ``Reducer::rebuild_buckets`` → ``compute_bucket_assignment_by_size``
    with limits ``[first_bucket_cap, cap]`` (see the module docstring for the rules).
    ``params_in_ready_order`` is the order in which the gradients become ready in
    backward (the order DDP records in the first iteration); ``bucket_cap_mb`` is
    DDP's argument in MiB, ``None`` for PyTorch's default (25 MiB, 1 MiB first
    bucket). Runs in time linear in the number of parameters.
    """
    first_cap_bytes, cap_bytes = bucket_caps_bytes(bucket_cap_mb)
    limits = (first_cap_bytes, cap_bytes)
    last_limit_pos = len(limits) - 1
    open_buckets: dict[str, _OpenBucket] = {}  # insertion order = first appearance
    formed: list[tuple[tuple[str, ...], int, str, int]] = []
    for param in params_in_ready_order:
        dtype = param.dtype
        bucket = open_buckets.get(dtype)
        if bucket is None:
            bucket = open_buckets[dtype] = _OpenBucket()
        bucket.names.append(param.name)
        bucket.size_bytes += param.size_bytes
        limit = limits[bucket.limit_pos]
        if bucket.size_bytes >= limit:
            formed.append((tuple(bucket.names), bucket.size_bytes, dtype, limit))
            bucket.names = []
            bucket.size_bytes = 0
            if bucket.limit_pos < last_limit_pos:
                bucket.limit_pos += 1
    # Leftover partial buckets: reverse order of each dtype's first appearance.
    for dtype in reversed(open_buckets):
        bucket = open_buckets[dtype]
        if bucket.names:
            formed.append(
                (tuple(bucket.names), bucket.size_bytes, dtype, limits[bucket.limit_pos])
            )
    buckets = tuple(
        Bucket(index=i, param_names=names, size_bytes=size, dtype=dtype, size_limit_bytes=lim)
        for i, (names, size, dtype, lim) in enumerate(formed)
    )
    return BucketPlan(
        buckets=buckets, bucket_cap_bytes=cap_bytes, first_bucket_cap_bytes=first_cap_bytes
    )


def ddp_buckets(model: ModelSpec, *, bucket_cap_mb: float | None = None) -> BucketPlan:
    """DDP's steady-state buckets for ``model``, from its gradient-ready order.

    The parameters are taken in ``model.grad_ready_params`` order: layers in reverse
    execution order, each in its ``grad_ready_order`` (by default its parameters
    reversed). That is the order real DDP records in the first backward and rebuilds
    its buckets from; it is exact for the catalog models, whose specs give each
    layer the parameters it runs with and autograd's order inside it (norms hand
    over ``weight`` before ``bias``, ``Linear`` ``bias`` before ``weight``). For a
    model described only by its registration order (no ``grad_ready_order``, no
    ``registration_order``) it falls back to reverse registration order, which is
    exact for a sequential stack of ``Linear``/embedding modules running in
    registration order but not, e.g., for ``nn.TransformerEncoderLayer`` (norms
    registered last); pass an observed order to :func:`assign_buckets` then.
    ``bucket_cap_mb`` as in :func:`assign_buckets`.
    """
    return assign_buckets(model.grad_ready_params, bucket_cap_mb=bucket_cap_mb)
