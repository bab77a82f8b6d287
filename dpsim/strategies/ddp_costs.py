"""PyTorch DDP's own costs: the work ``DistributedDataParallel`` adds to a training step.

Read from torch 2.13.0's ``torch/nn/parallel/distributed.py`` (installed beside dpsim) and
``torch/csrc/distributed/c10d/reducer.cpp`` / ``comm.cpp`` (pytorch/pytorch@00413201d3d3);
what is charged, per synchronised micro-batch unless said otherwise:

* **Copies into the buckets.** When a gradient is ready, ``Reducer::mark_variable_ready_dense``
  writes it into its bucket: ``at::mul_out(bucket_view, grad, 1/world_size)`` (the division
  fused into the copy), or ``bucket_view.copy_(grad)`` under a comm hook. With
  ``gradient_as_bucket_view=True`` the gradient becomes a view of the bucket, but
  ``optimizer.zero_grad()`` sets gradients to ``None`` by default (torch >= 2.0), so autograd
  allocates a fresh one every step and the copy happens all the same (the 2.13 docstring
  of ``batched_grad_copy`` says so); either way one kernel per parameter reading and writing
  its gradient, charged to the backward of the layer that produced it.
* **Copies back** (``gradient_as_bucket_view=False``, the default): after the bucket's
  all-reduce, ``Reducer::finalize_backward`` waits for it and runs ``copy_bucket_to_grad``,
  ``grad.copy_(bucket_view)`` per parameter, on the compute stream at the end of backward,
  before the optimizer. With the view they are not needed. The step program starts them once
  every bucket's all-reduce is done, not each behind its own bucket's
  (:func:`dpsim.strategies.ddp._ddp_epilogue` says why and what it costs).
* **Memory**: the buckets hold a second copy of every gradient unless they *are* the
  gradients (``gradient_as_bucket_view``: "the saved memory size will be equal to the total
  gradients size", DDP's docstring) — :func:`ddp_comm_buffer_bytes`.
* **Host overhead.** Every kernel above takes at least PyTorch's dispatch time
  (:data:`~dpsim.workload.roofline.HOST_OVERHEAD_PER_OP_S`, the roofline's per-kernel
  floor), which covers the C++ ``Reducer::autograd_hook`` that precedes each copy; and DDP's
  ``forward`` wrapper (``_pre_forward``/``_post_forward``: ``prepare_for_forward``, the
  rebuild check, ``prepare_for_backward``) takes :data:`DDP_FORWARD_DISPATCHES` dispatches'
  worth of CPU time per micro-batch. ``python validation/ddp_host_costs.py`` measures these
  on real DDP (gloo, one rank) and prints them beside the model's figures.
* **broadcast_buffers** (default on; ``forward_sync_buffers`` in torch 2.13): when the
  module has buffers (BatchNorm's running statistics), ``_pre_forward`` broadcasts them
  from rank 0 before the forward of the first micro-batch of a step (the ones after it run
  under ``no_sync`` and skip it): ``_broadcast_coalesced`` flattens them into one buffer (a
  concatenation kernel), broadcasts it on the process group's stream, waits for it (the
  forward cannot start before) and copies each buffer back (``BroadcastWork::finish``,
  one kernel per buffer).
* **find_unused_parameters** (without ``static_graph``): at the end of each synchronised
  forward ``Reducer::prepare_for_backward`` walks the autograd graph from the outputs
  (``search_unused_parameters``), :data:`UNUSED_SEARCH_PER_NODE_S` per graph node
  (:func:`autograd_nodes` estimates the nodes); buckets are never rebuilt, so they stay in
  the order of ``model.parameters()`` reversed (:func:`registration_order_buckets`); after the
  last bucket the map of used parameters (one ``int32`` per parameter tensor, on the GPU)
  is all-reduced and ``finalize_backward`` waits for it before the copies back.
* **static_graph**: the used parameters are recorded in the first iteration, so in the
  steady state there is no search, no used-parameter all-reduce, and buckets are rebuilt
  in gradient-ready order as without ``find_unused_parameters``; without
  ``find_unused_parameters`` the steady-state step is the default one.

The first iteration (a single bucket, the rebuild) is not modelled: every simulated step
is a steady-state step.
"""

from __future__ import annotations

from dataclasses import replace

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GpuSpec
from dpsim.strategies.comm_hooks import (
    POWERSGD_DEFAULT_START_ITER,
    BucketHook,
    bucket_hook,
    check_comm_hook,
    powersgd_split,
)
from dpsim.workload.buckets import Bucket, BucketPlan, assign_buckets
from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S, Efficiencies, memory_term
from dpsim.workload.spec import DTYPE_SIZE_BYTES, ModelSpec, ParamSpec

DDP_FORWARD_DISPATCHES = 2
"""CPU time of DDP's forward wrapper, in kernel dispatches
(:data:`~dpsim.workload.roofline.HOST_OVERHEAD_PER_OP_S` each). Measured: a one-parameter
module's forward takes 12.5-14.2 us more wrapped in DDP than bare (torch 2.13.0, gloo, one
rank, this project's shared 2-core x86_64 build machine, ``python validation/ddp_host_costs.py``),
about two dispatches of 8 us."""

UNUSED_SEARCH_PER_NODE_S = 0.3e-6
"""CPU time ``search_unused_parameters`` spends per autograd node. Measured with
``python validation/ddp_host_costs.py`` (forward + backward with ``find_unused_parameters=True``
against ``static_graph=True``, chains of 400 and 1,600 tiny layers, torch 2.13.0, one gloo rank):
0.2-0.5 us per node when the shared 2-core build machine was quiet, up to 4 us when it was
busy; the quiet figure is kept. A GPT-2 XL step walks ~1,600 nodes: 0.5 ms."""

USED_MAP_ELEMENT_BYTES = 4
"""``local_used_map_``: one ``int32`` per parameter tensor (``reducer.cpp``, ``at::kInt``)."""


@frozen_dataclass
class DdpOptions:
    """The ``DistributedDataParallel`` arguments that change the step (torch's defaults)."""

    gradient_as_bucket_view: bool = False
    """Gradients are views of the buckets: no copy back, no second gradient buffer."""
    static_graph: bool = False
    """The graph is the same every step: no unused-parameter search after the first."""
    find_unused_parameters: bool = False
    """Search the autograd graph for unused parameters every forward."""
    broadcast_buffers: bool = True
    """Broadcast module buffers from rank 0 before each synchronised forward."""
    comm_hook: str = "off"
    """Communication hook (:data:`~dpsim.strategies.comm_hooks.COMM_HOOKS`)."""
    powersgd_rank: int = 1
    """PowerSGD's ``matrix_approximation_rank``."""
    powersgd_start_iter: int = POWERSGD_DEFAULT_START_ITER
    """PowerSGD's ``start_powerSGD_iter``: steps of vanilla all-reduce before compressing."""

    def __post_init__(self) -> None:
        check_comm_hook(self.comm_hook)
        for name in ("gradient_as_bucket_view", "static_graph", "find_unused_parameters", "broadcast_buffers"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"--{name.replace('_', '-')}: {getattr(self, name)!r} is not valid; "
                                  f"expected true or false")
        for name, low in (("powersgd_rank", 1), ("powersgd_start_iter", 2)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ConfigError(f"--{name.replace('_', '-')}: {v!r} is not valid; expected an integer >= {low}")

    @property
    def searches_unused(self) -> bool:
        """The unused-parameter search runs every step (``find_unused_parameters`` without ``static_graph``)."""
        return self.find_unused_parameters and not self.static_graph

    @property
    def is_default(self) -> bool:
        """Every argument at torch's default."""
        return self == DdpOptions()

    def warmup(self) -> DdpOptions:
        """The options of PowerSGD's warm-up steps (vanilla all-reduce, as its hook runs them)."""
        return replace(self, comm_hook="allreduce") if self.comm_hook == "powersgd" else self


DEFAULT_DDP_OPTIONS = DdpOptions()
"""torch's defaults."""

def registration_order_buckets(params: list[ParamSpec], *, bucket_cap_mb: float | None) -> BucketPlan:
    """DDP's initial buckets, which it keeps when it never rebuilds them
    (``find_unused_parameters=True`` without ``static_graph``): ``params`` in
    ``model.parameters()`` order grouped by ``compute_bucket_assignment_by_size`` (1 MiB first
    bucket by default), sorted by their first parameter, then reversed
    (``DistributedDataParallel._ddp_init_helper``: "reverse list of buckets because we want to
    approximate the order in which their gradients are produced")."""
    plan = assign_buckets(params, bucket_cap_mb=bucket_cap_mb)
    position = {p.name: i for i, p in enumerate(params)}
    ordered = sorted(plan.buckets, key=lambda b: min(position[n] for n in b.param_names), reverse=True)
    buckets = tuple(Bucket(index=i, param_names=b.param_names, size_bytes=b.size_bytes, dtype=b.dtype,
                           size_limit_bytes=b.size_limit_bytes) for i, b in enumerate(ordered))
    return BucketPlan(buckets=buckets, bucket_cap_bytes=plan.bucket_cap_bytes,
                      first_bucket_cap_bytes=plan.first_bucket_cap_bytes)


def ddp_buckets(model: ModelSpec, grad_dtype: str, options: DdpOptions, *,
                bucket_cap_mb: float | None) -> BucketPlan:
    """The steady-state buckets of ``model`` under ``options``: rebuilt in gradient-ready order,
    or, while unused parameters are searched every step, the initial registration-order ones."""
    if options.searches_unused:
        return registration_order_buckets(with_dtype(model.params, grad_dtype), bucket_cap_mb=bucket_cap_mb)
    return assign_buckets(with_dtype(model.grad_ready_params, grad_dtype), bucket_cap_mb=bucket_cap_mb)


def with_dtype(params, dtype: str) -> list[ParamSpec]:
    """``params`` with their gradient dtype."""
    return [ParamSpec(name=p.name, shape=p.shape, dtype=dtype) for p in params]


def autograd_nodes(model: ModelSpec) -> int:
    """Autograd nodes the unused-parameter search visits: one per costed op of each layer (at
    least one per layer) and one ``AccumulateGrad`` per parameter. A lower bound: views and
    reshapes are nodes too."""
    return sum(max(1, len(layer.ops)) for layer in model.layers) + len(model.params)


@frozen_dataclass
class DdpCosts:
    """DDP's own work in one step, ready for the step program (:func:`dpsim.strategies.ddp.ddp_program`)."""

    options: DdpOptions
    """What was costed."""
    copy_in_s: dict[int, float]
    """Layer index -> the copies of its gradients into their buckets (synchronised micro-batch)."""
    hooks: tuple[BucketHook, ...]
    """Per bucket, in launch order: the comm hook's collectives and kernels."""
    copy_out_s: tuple[float, ...]
    """Per bucket: the copies back into the gradients after its all-reduce (0 with the view)."""
    pre_forward_s: float
    """DDP's forward wrapper, per micro-batch."""
    buffer_bytes: float
    """Buffers broadcast before the first micro-batch's forward (0: none)."""
    buffer_flatten_s: float
    """Flattening them into one tensor."""
    buffer_unflatten_s: float
    """Copying the broadcast values back into each buffer."""
    unused_search_s: float
    """The unused-parameter search after each synchronised forward (0 unless it runs)."""
    used_map_bytes: float
    """The used-parameter map all-reduced after the last bucket (0 unless the search runs)."""

    @property
    def copies_s(self) -> float:
        """Bucket copies, in and back."""
        return sum(self.copy_in_s.values()) + sum(self.copy_out_s)

    @property
    def hooks_s(self) -> float:
        """The comm hook's kernels."""
        return sum(h.hook_s for h in self.hooks)


def ddp_costs(model: ModelSpec, buckets: BucketPlan, gpu: GpuSpec, grad_dtype: str, options: DdpOptions,
              eff: Efficiencies | None = None) -> DdpCosts:
    """DDP's own work for ``model`` with ``buckets`` (gradients in ``grad_dtype``) on ``gpu``
    (see the module docstring)."""
    eff = eff or Efficiencies()
    g = DTYPE_SIZE_BYTES[grad_dtype]
    numel = {p.name: p.numel for p in model.params}

    def copy_s(names) -> float:
        # One kernel per gradient, reading it and writing the bucket (or the other way round).
        return sum(memory_term(2.0 * numel[n] * g, gpu).time_s(eff) for n in names)

    copy_in = {i: copy_s([p.name for p in layer.params]) for i, layer in enumerate(model.layers) if layer.params}
    by_name = {p.name: p for p in model.params}
    hooks = tuple(bucket_hook(options.comm_hook, tuple(by_name[n] for n in b.param_names), grad_dtype, gpu,
                              powersgd_rank=options.powersgd_rank, eff=eff) for b in buckets.buckets)
    copy_out = tuple(0.0 if options.gradient_as_bucket_view else copy_s(b.param_names) for b in buckets.buckets)
    buffers = model.buffers if options.broadcast_buffers else ()
    buffer_bytes = float(sum(b.size_bytes for b in buffers))
    flatten = memory_term(2.0 * buffer_bytes, gpu).time_s(eff) if buffers else 0.0
    unflatten = sum(memory_term(2.0 * b.size_bytes, gpu).time_s(eff) for b in buffers)
    return DdpCosts(
        options=options, copy_in_s=copy_in, hooks=hooks, copy_out_s=copy_out,
        pre_forward_s=DDP_FORWARD_DISPATCHES * HOST_OVERHEAD_PER_OP_S,
        buffer_bytes=buffer_bytes, buffer_flatten_s=flatten, buffer_unflatten_s=unflatten,
        unused_search_s=autograd_nodes(model) * UNUSED_SEARCH_PER_NODE_S if options.searches_unused else 0.0,
        used_map_bytes=float(USED_MAP_ELEMENT_BYTES * len(model.params)) if options.searches_unused else 0.0,
    )


def ddp_comm_buffer_bytes(model: ModelSpec, grad_dtype: str, options: DdpOptions, *,
                          bucket_cap_mb: float | None) -> float:
    """GPU memory DDP keeps beside the model state: the buckets (a second copy of every
    gradient unless ``gradient_as_bucket_view``), the used-parameter map, the buffers' flat
    copy while they are broadcast, and the comm hook's state and in-flight copies
    (fp16/bf16: the 16-bit copy of every bucket, all in flight when communication lags;
    PowerSGD: the error of every bucket, P and Q, and one bucket's clone and concatenated
    vectors while it is compressed)."""
    g = DTYPE_SIZE_BYTES[grad_dtype]
    grads = float(model.param_count * g)
    total = 0.0 if options.gradient_as_bucket_view else grads
    if options.searches_unused:
        total += USED_MAP_ELEMENT_BYTES * len(model.params)
    if options.broadcast_buffers:
        total += sum(b.size_bytes for b in model.buffers)
    hook = options.comm_hook
    if hook in ("fp16-compress", "bf16-compress"):
        total += model.param_count * 2.0
    elif hook == "powersgd":
        buckets = ddp_buckets(model, grad_dtype, options, bucket_cap_mb=bucket_cap_mb)
        by_name = {p.name: p for p in model.params}
        total += grads
        transient = 0.0
        for b in buckets.buckets:
            compressed, uncompressed = powersgd_split(tuple(by_name[n] for n in b.param_names),
                                                      options.powersgd_rank)
            total += sum((n + m) * r for n, m, r in compressed) * g
            transient = max(transient, b.size_bytes + uncompressed * g)
        total += transient
    return total
