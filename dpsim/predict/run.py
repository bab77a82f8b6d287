"""The public API: predict one data-parallel training configuration.

>>> from dpsim.predict import PredictConfig, predict
>>> p = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2"))
>>> p.n_gpus, p.scaling_efficiency <= 1.0
(16, True)
"""

from __future__ import annotations

from dataclasses import replace

from dpsim.api_args import checked_arguments
from dpsim.collectives.groups import Communicator, GroupCollectives, LayoutShape, multi_server_domain
from dpsim.collectives.links import link_report
from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.nccl_tuning import parse_algorithms, parse_protocols
from dpsim.collectives.ops import CollectiveModel, CollectiveResult
from dpsim.engine.play import play_program
from dpsim.engine.program import StepProgram
from dpsim.engine.simulate import PlayedCollectives, played_durations
from dpsim.errors import ConfigError
from dpsim.limits import MAX_PIPELINE_SLOTS, MAX_SIMULATED_MICRO_BATCHES, short
from dpsim.hardware import get_gpu, power_cap_throughput
from dpsim.memory import FitAdvice, MemoryBreakdown, fit_advice, memory_breakdown, offload_memory
from dpsim.network.degrade import (
    calibrated_factors,
    check_degradations,
    communicator_degradations,
    degradation_terms,
    names_one_link,
    slowest_class_factors,
)
from dpsim.network.tiers import TierNetwork
from dpsim.strategies.offload import host_bytes_per_param, host_step_s, param_fetches
from dpsim.predict.config import SETTINGS, PredictConfig, capped_compute_efficiency, one_gpu_compute_ratio
from dpsim.predict.layout import (
    check_all_to_all_options,
    check_layout,
    check_no_expert_options,
    layout_fit,
    layout_memory,
    layout_shape,
    model_source,
    predict_layout,
)
from dpsim.predict.extrapolate import NotPeriodic, chunks_of, extrapolated, not_periodic_message, sample_counts
from dpsim.predict.memo import memoized
from dpsim.predict.model_error import interval as model_error_interval
from dpsim.predict.model_error import layout_kind, query_features, regime_of
from dpsim.predict.provenance import (
    SensitivityPoint,
    TransportSensitivity,
    apply_profile,
    charge_after_comm,
    check_cpu_compute,
    check_profile_layout,
    preset_provenance,
)
from dpsim.predict.resolve import Resolved, resolve
from dpsim.predict.result import MemoryReport, Prediction
from dpsim.profile.calibrated import (
    calibrated_collectives,
    calibrated_device,
    degraded_bandwidth_factor,
    profile_ranks_per_node,
)
from dpsim.profile.io import load_profile
from dpsim.strategies.build import build_step_program
from dpsim.strategies.registry import SHARDED_STRATEGIES
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_cluster_spec
from dpsim.topology.spec import TopologySpec, ddp_allreduce_after_backward, nic_fabric
from dpsim.topology.transport import TRANSPORT_ASSUMPTION_NOTE
from dpsim.wording import count
from dpsim.workload.attention_rates import check_attention_kernel_on_gpu
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import ComputeProfile, compute_profile
from dpsim.workload.from_torch import load_torch_workload
from dpsim.workload.layers import with_activation_count, with_attention_kernel
from dpsim.workload.model_ref import is_torch_model_ref
from dpsim.workload.precision import Precision, check_fp8_params_strategy, check_precision_on_gpu, get_precision
from dpsim.workload.roofline import Efficiencies
from dpsim.workload.shapes import is_config_json_ref, shape_ref_of_config_json
from dpsim.workload.spec import AttentionOp, ModelSpec


def resolve_topology(config: PredictConfig) -> Topology:
    """The cluster a config describes (preset or file, GPUs, GPUs per node, GPU override)."""
    cl = config.cluster
    spec: TopologySpec = load_cluster_spec(cl.topology_file, cl.link)
    if cl.gpu is not None:
        get_gpu(cl.gpu)
        from dataclasses import replace
        spec = replace(spec, gpu=cl.gpu.lower())
    topology = Topology.from_spec(spec, cl.gpus, cl.gpus_per_node)
    topology.check_connected()
    return topology


def _resolve_topology(config: PredictConfig, profile) -> Topology:
    """:func:`resolve_topology`; with a profile, a node layout its measurements cannot cost is
    refused with the profile's ranks per node as the fix."""
    if profile is None:
        return resolve_topology(config)
    try:
        topology = resolve_topology(config)
    except ConfigError as exc:
        rpn = profile_ranks_per_node(profile)
        if rpn is None or config.cluster.gpus_per_node == rpn:
            raise
        raise ConfigError(f"{exc}; profile {profile.name} was measured with {count(rpn, 'rank')} per node: "
                          f"add --gpus-per-node {rpn}") from None
    check_profile_layout(config, profile, topology)
    return topology


class CollectiveFactory:
    """The one factory of a job's collective models (:func:`build_collectives`): a calibration profile's fits, or
    NCCL's choice on the flow model. A class, not a closure, so that a :class:`~dpsim.predict.result.Prediction`
    that holds the models pickles (a process pool's results, a notebook's cache): with a closure here
    ``pickle.dumps(dpsim.predict(config))`` failed "Can't pickle local object 'build_collectives.<locals>.make'"."""

    def __init__(self, *, profile, degradations, algorithms, protocols, jobs: int, placement: str) -> None:
        self.profile, self.degradations = profile, degradations
        self.algorithms, self.protocols, self.jobs, self.placement = algorithms, protocols, jobs, placement

    def __call__(self, comm: Communicator) -> CollectiveModel:
        profile, degradations = self.profile, self.degradations
        if profile is not None:
            # A degraded link at a fraction of its calibrated rate: the GPU links' (intra_node fits) or the NICs'
            # (inter_node), for the copy of this communicator that holds it (dpsim.profile.calibrated).
            degraded = calibrated_factors(degradations, comm.job, comm.topology) if degradations else None
            model = calibrated_collectives(profile, comm.topology, concurrent=comm.concurrent, degraded=degraded)
            if degradations and comm.topology.n_gpus > 1:
                # The all-to-alls are costed on the fabric beside the calibrated collectives: the slowest degraded
                # link of each class they cross paces them there too (dpsim.predict.layout.degraded_classes).
                model.class_factors = slowest_class_factors(
                    TierNetwork(comm.topology), communicator_degradations(degradations, comm.job, comm.topology))
            return model
        # The jobs share NICs and switches, never a server's NVLink (each job has whole servers): a group
        # inside one server (--zero-group 2 of fsdp-hybrid, InternLM's zero1 group) shares nothing with the other
        # jobs. Costed as the other jobs' servers, it was refused "--gpus 2 is less than one server" (--gpus 16).
        inside_server = comm.topology.n_gpus < comm.topology.spec.node.gpus_per_node
        return NcclCollectives(comm.topology, algorithms=self.algorithms, protocols=self.protocols,
                               jobs=1 if inside_server else self.jobs,
                               placement=self.placement, degradations=degradations,
                               job=None if comm.name == "world" else comm.job)


def build_collectives(config: PredictConfig, topology: Topology, *, profile=None,
                      degradations=(), layout: LayoutShape | None = None) -> GroupCollectives:
    """The collective models of ``config``'s job: its world and every sub-communicator.

    One factory costs every communicator the same way: a calibration profile's fitted
    model when ``config.calibration.profile`` is set (``profile``: that profile, already loaded;
    :mod:`dpsim.profile.calibrated`), else NCCL's algorithm/protocol choice on the flow
    model (:class:`~dpsim.collectives.nccl.NcclCollectives`) with ``config``'s
    ``--algo/--proto/--jobs/--placement``, its links scaled by ``degradations``
    (:class:`~dpsim.network.degrade.LinkDegradation`, ``--degrade``, named on the job's
    cluster whichever communicator they fall on). ``layout`` adds a tensor/pipeline layout's
    ``tp``, ``dp``, ``pp`` and ``emb`` groups (:func:`~dpsim.collectives.groups.layout_communicators`).
    """
    if profile is None and config.calibration.profile is not None:
        profile = load_profile(config.calibration.profile)
    algorithms, protocols = parse_algorithms(config.cluster.algo), parse_protocols(config.cluster.proto)
    if profile is not None:
        check_collective_flags_with_profile(config)

    par = config.parallelism
    # HSDP's and MiCS's shard group (--zero-group with fsdp-hybrid or zero3) re-forms the hybrid communicators;
    # None: one node.
    shard_group = par.zero_group if par.strategy in ("fsdp-hybrid", "zero3") and layout is None else None
    if degradations:
        # Names are given on the job's cluster: checked there once, whichever communicators they reach
        # (a layout's or a shard group's communicators see them through communicator_degradations).
        if topology.n_gpus == 1:
            # No collective, so no link carries the job's traffic: nvlink:10% or node0.gpu0:10% predicted the
            # healthy step to the last digit (status 0).
            raise ConfigError(f"--degrade: {degradations[0].label!r} would change nothing: a 1-GPU job runs no "
                              f"collective over any link; leave it out, or give --gpus 2 or more")
        jobs = max(1, config.cluster.jobs)  # with --jobs, node<K> counts every job's servers
        degradation_terms(TierNetwork(Topology(spec=topology.spec, n_gpus=topology.n_gpus * jobs)), degradations)
        if profile is not None:
            # A class the profile has no rate for is refused now, and so are slowed GPU links on a multi-node
            # job whose profile cannot say how far they are above its NICs (not at the first collective).
            degraded = calibrated_factors(degradations, topology, topology)
            degraded_bandwidth_factor(profile, "inter_node" if topology.n_nodes > 1 else "intra_node", degraded)
    make = CollectiveFactory(profile=profile, degradations=degradations, algorithms=algorithms,
                             protocols=protocols, jobs=config.cluster.jobs, placement=config.cluster.placement)
    contiguous = config.cluster.rack_placement == "contiguous"
    if contiguous:
        # A shard group of every rank (fsdp-hybrid or zero3 with --zero-group = --gpus) is plain FSDP/ZeRO-3: no group
        # smaller than the job, as InternLM's --zero-group of every rank (that one was refused, these two were taken).
        groups = layout is not None or any(g is not None and g < topology.n_gpus for g in (shard_group, par.zero_group))
        _check_rack_placement(topology, groups=groups, jobs=config.cluster.jobs, degradations=degradations)
    return GroupCollectives(topology, make, layout=layout, zero_group=par.zero_group, shard_group=shard_group,
                            contiguous=contiguous)


def check_collective_flags_with_profile(config: PredictConfig) -> None:
    """Refuse ``--algo``, ``--proto`` and ``--jobs`` beside a calibration profile (one line naming the flag):
    ``predict`` costs collectives with the profile's fits and ``memory`` takes predict's command line, so both
    refuse them alike."""
    c = config.cluster
    # Dropped in silence: a profile's fits are what NCCL chose on the measured cluster, alone on it;
    # the step was the same with any --algo/--proto and with --jobs 2 interleaved on a 4:1 fabric.
    for flag, value, why in (
            ("--algo", c.algo if parse_algorithms(c.algo) is not None else None,
             "its fits are the algorithms NCCL chose when it was measured"),
            ("--proto", c.proto if parse_protocols(c.proto) is not None else None,
             "its fits are the protocols NCCL chose when it was measured"),
            ("--jobs", c.jobs if c.jobs > 1 else None,
             "a calibrated collective model has no links for jobs to share")):
        if value is not None:
            raise ConfigError(f"{flag}: {value!r} is not available with --calibration ({why}); leave one of "
                              f"them out")


def has_placeable_group(par, n_gpus: int) -> bool:
    """Whether a job of ``n_gpus`` with parallelism ``par`` has a group smaller than itself, which
    ``--rack-placement`` could place: a tp/pp/cp/ep layout or a ``--zero-group`` under ``n_gpus`` (a shard
    group of every rank is plain FSDP/ZeRO-3)."""
    return bool(par.layout_active) or (par.zero_group is not None and par.zero_group < n_gpus)


def _check_rack_placement(topology: Topology, *, groups: bool, jobs: int, degradations=()) -> None:
    """Refuse ``--rack-placement contiguous`` where it could change nothing (one line,
    :func:`rack_placement_unused`; ``groups``: the job has a group smaller than itself), with ``--jobs`` or with
    a ``--degrade`` that names one server's link."""
    why = rack_placement_unused(topology, groups=groups)
    if why is not None:
        raise ConfigError(why)
    if jobs > 1:
        raise ConfigError(f"--rack-placement: 'contiguous' is not modelled with --jobs {jobs} (each job's servers "
                          f"are laid out by --placement); leave one of them out")
    refuse_named_links_contiguous(degradations)


def refuse_named_links_contiguous(degradations) -> None:
    """Refuse a ``--degrade`` that names one server's link under ``--rack-placement contiguous`` (one line);
    ``predict`` and ``plan`` both (plan took it and printed a best command predict refused)."""
    named = next((d for d in degradations if names_one_link(d.link)), None)
    if named is not None:
        # Each group is costed as its copy that straddles the racks worst, and a named link was put in that copy
        # whichever copy holds it: node0.nic0:10% on 100 GB200s (--tp 4 --pp 5) slowed the step 4.6x though
        # node0's copies sit inside rack 0 and cross no NIC (aligned: 1.06x).
        raise ConfigError(f"--degrade: {named.label!r} names one server's link, and --rack-placement contiguous "
                          f"costs each group as its copy that straddles the racks worst, not the copy holding "
                          f"that link; degrade a link class (e.g. infiniband:50%) or give --rack-placement aligned")


RACK_PLACEMENT_ALLOWED = ("it applies to a tp/pp/cp/ep layout or a --zero-group on NVLink domains of several servers; "
                          "give aligned (the default) or leave it out")
"""What ``--rack-placement contiguous`` applies to, the end of every refusal of it."""


def rack_placement_unused(topology: Topology, *, groups: bool = True) -> str | None:
    """Why ``--rack-placement contiguous`` changes nothing on ``topology`` (one line), or ``None`` where it can
    matter: without NVLink domains of several servers, on a job inside one domain, or (``groups`` false) with no
    group smaller than the job (the world, one server's ``intra`` and the one-GPU-per-server ``inter`` sit the
    same way whatever the placement)."""
    per_domain = multi_server_domain(topology)
    head = "--rack-placement: 'contiguous' changes nothing here"
    if not per_domain:
        return (f"{head}: {topology.spec.name!r} has no NVLink domain of several servers (e.g. gb200-nvl72's racks); "
                f"{RACK_PLACEMENT_ALLOWED}")
    if topology.n_nodes <= per_domain:
        return (f"{head}: {topology.n_gpus:,} GPUs fit in one NVLink domain of {per_domain} servers; "
                f"{RACK_PLACEMENT_ALLOWED}")
    if not groups:
        return (f"{head}: the job has no group smaller than itself to place (data parallelism alone); "
                f"{RACK_PLACEMENT_ALLOWED}")
    return None


def gradient_collective(program: StepProgram, gradient_ops, collectives: GroupCollectives) -> CollectiveResult | None:
    """The step's largest gradient collective as the model that ran costs it (``predict --json``'s
    ``ring`` block): its algorithm, protocol, channels, latency and bus bandwidth."""
    ops = [program.comms[i] for i in gradient_ops] or list(program.comms)
    if not ops:
        return None
    largest = max(ops, key=lambda c: c.size_bytes)
    return collectives.group(largest.group).time(largest.op, largest.size_bytes)


SENSITIVITY_FACTORS = (0.5, 1.5)
"""The NIC efficiencies an assumed transport's step is also shown at, as multiples of the one
used (capped at 1): halving covers a 2019 cloud VM's socket (NVIDIA/nccl#209: 2.06 GB/s) against
the 4.4 GB/s of one bare-metal CPU thread the socket preset assumes; adding half is the same
spread the other way."""


@checked_arguments("dpsim.predict", config_settings=SETTINGS)
def predict(config: PredictConfig, *, degradations=(), model: ModelSpec | None = None,
            topology: Topology | None = None) -> Prediction:
    """Predict a data-parallel training step.

    The fields a calibration profile decides and ``config`` leaves out take the profile's
    values (:func:`dpsim.predict.resolve.resolve`; the prediction's ``config`` is the resolved
    one), as on the command line. ``degradations``
    (:class:`~dpsim.network.degrade.LinkDegradation`) run some links below capacity in the
    collective model :func:`build_collectives` builds. ``model``: a model built in Python (e.g.
    a published configuration that is not in the catalog) instead of ``config.model``, which
    then only names it. ``topology``: the cluster to use instead of the one ``config`` names
    (with a calibration profile, one whose layout its measurements cover).
    """
    resolved = resolve(config)
    check_predict_arguments(degradations=degradations, model=model, topology=topology)
    return predict_resolved(resolved, degradations=degradations, model=model, topology=topology)


def check_predict_arguments(*, degradations, model, topology) -> None:
    """:func:`predict`'s keyword arguments, checked as ``config`` is (a string, a list of strings or a
    number was an AttributeError or TypeError deep in the run): ``degradations`` by the validator of
    ``--degrade`` (:func:`~dpsim.network.degrade.check_degradations`), ``model`` and ``topology`` by type."""
    check_degradations(degradations)
    for name, value, kind, example in (("model", model, ModelSpec, "dpsim.workload.catalog.get_model('gpt2')"),
                                       ("topology", topology, Topology, "leave it out: config.link names one")):
        if value is not None and not isinstance(value, kind):
            raise ConfigError(f"{name}: {short(value)} is not valid; expected a {kind.__name__} or None ({example})")


def checked_precision(config: PredictConfig, model: ModelSpec, gpu) -> Precision:
    """The job's precision, after the checks a prediction and a memory report both make, so that
    ``dpsim memory`` refuses exactly the jobs ``dpsim predict`` refuses: expert and all-to-all
    options against the model, the precision and attention kernel against the GPU (a CPU profile's
    device has no tensor cores to check), and ``--power-cap-w`` against the GPU's measured curve and
    against a measured compute (a profile's or a one-GPU step, measured at the GPU's own power limit:
    a cap on top would be dropped by it, so the pair is refused rather than one of them ignored)."""
    if model.moe is None:  # every path: a data-parallel-only prediction too (check_layout covers layouts)
        check_no_expert_options(model.name, config.parallelism)
    check_all_to_all_options(model, config.parallelism)
    precision = get_precision(config.execution.precision, config.execution.fp8, strategy=config.parallelism.strategy,
                              fsdp_version=config.parallelism.fsdp_version, compile=config.execution.compile,
                              layout=config.parallelism.layout_active, fp8_params=config.execution.fp8_params)
    if config.execution.fp8_params:
        check_fp8_params_strategy(config.parallelism.strategy, fsdp_version=config.parallelism.fsdp_version,
                                  layout=config.parallelism.layout_active)
    if gpu.peak_flops_per_s:
        check_precision_on_gpu(precision, gpu)
        check_attention_kernel_on_gpu(config.execution.attention_kernel, gpu)
    cap_w = config.cluster.power_cap_w
    if cap_w is not None:
        for flag, given in (("--calibration", config.calibration.profile is not None),
                            ("--single-gpu-step-ms", config.calibration.single_gpu_step_s is not None)):
            if given:
                raise ConfigError(f"--power-cap-w: {cap_w:g} W is not available with {flag} (its compute was "
                                  f"measured at the GPU's own power limit); leave one of them out")
        power_cap_throughput(gpu.name, cap_w)  # refuses a GPU with no measured curve
    return precision


def predict_resolved(resolved: Resolved, *, degradations=(), model: ModelSpec | None = None,
                     topology: Topology | None = None) -> Prediction:
    """:func:`predict` of a config already resolved, with its profile already read (a caller that
    predicts several times, or needs the profile itself, reads it once).

    Past :data:`~dpsim.predict.extrapolate.EXTRAPOLATE_ABOVE` micro-batches, a few counts are simulated and the
    steady state's increment carried to the config's (:mod:`dpsim.predict.extrapolate`), so the cost does not
    grow with the micro-batches; where it does not repeat, every micro-batch is simulated within the full
    path's limit (:func:`~dpsim.predict.extrapolate.full_simulation` forces that path)."""
    config = resolved.config
    counts = sample_counts(config)
    if counts is not None:
        seen: dict = {}
        try:
            out = extrapolated(lambda c: _predict_full(replace(resolved, config=c), degradations=degradations,
                                                       model=model, topology=topology, seen=seen), config, counts)
        except NotPeriodic as exc:
            if not full_path_allowed(config):
                raise ConfigError(not_periodic_message(config, str(exc))) from None
        else:
            stages, memory, fit = seen.pop("memory_at")(config)
            if stages is not None:
                out = replace(out, layout=replace(out.layout, stages=tuple(
                    replace(r, memory=m) for r, m in zip(out.layout.stages, stages))))
            return with_model_error(replace(out, memory=memory, fit=fit), **seen)
    return _predict_full(resolved, degradations=degradations, model=model, topology=topology)


def full_path_allowed(config: PredictConfig) -> bool:
    """Whether simulating every micro-batch of ``config`` is within the limits the config's checks apply to
    that path (:data:`~dpsim.limits.MAX_SIMULATED_MICRO_BATCHES`, :data:`~dpsim.limits.MAX_PIPELINE_SLOTS`)."""
    if config.parallelism.layout_active:
        return config.parallelism.pp * chunks_of(config) * config.micro_batches <= MAX_PIPELINE_SLOTS
    return config.workload.steps * config.micro_batches <= MAX_SIMULATED_MICRO_BATCHES


def refuse_past_full_path(config, why: str) -> None:
    """Refuse ``config`` in one line where it needs every micro-batch simulated (``why``) and that passes the full
    path's limit; an extrapolated prediction (:mod:`dpsim.predict.extrapolate`) would not have served it."""
    if full_path_allowed(config):
        return
    layout = config.parallelism.layout_active
    total = (config.parallelism.pp * chunks_of(config) * config.micro_batches if layout
             else config.workload.steps * config.micro_batches)
    limit, unit = ((MAX_PIPELINE_SLOTS, "pipeline slots (stages x chunks x micro-batches)") if layout
                   else (MAX_SIMULATED_MICRO_BATCHES, "simulated micro-batches (--steps x micro-batches)"))
    raise ConfigError(f"micro-batches per replica: {config.micro_batches:,} gives {total:,} {unit}, and {why}, so "
                      f"every micro-batch is simulated; expected at most {limit:,} there (a step without it is "
                      f"extrapolated past that); raise --micro-batch or lower --global-batch")


def _predict_full(resolved: Resolved, *, degradations=(), model: ModelSpec | None = None,
                  topology: Topology | None = None, seen: dict | None = None) -> Prediction:
    """:func:`predict_resolved` simulating every micro-batch; ``seen`` (when given) receives the model, GPU and
    topology its model-error interval was computed with."""
    config, profile = resolved.config, resolved.profile
    if topology is None:
        topology = _resolve_topology(config, profile)
    elif profile is not None:
        check_profile_layout(config, profile, topology)  # a mix's job on its cluster's servers
    gpu = get_gpu(topology.spec.gpu)
    if profile is not None:
        gpu = check_cpu_compute(config, profile, calibrated_device(profile, gpu))
    # A given model (a published configuration) keeps what --activations says too: one count for every caller.
    model = load_model(config) if model is None else counted_model(model, config)
    precision = checked_precision(config, model, gpu)
    compute: ComputeProfile = memoized(  # memoized: a sweep shares it between points
        compute_profile, model, gpu, micro_batch=config.workload.micro_batch, precision=precision, optimizer=config.workload.optimizer,
        compute_efficiency=capped_compute_efficiency(config, gpu, profile), single_gpu_step_s=config.calibration.single_gpu_step_s,
        clip_grad_norm=config.workload.clip_grad_norm, zero_grad_loop=config.workload.zero_grad == "zero-loop",
    )
    if config.parallelism.layout_active:
        check_layout(config, model, topology)
    collectives = build_collectives(config, topology, profile=profile, degradations=degradations,
                                    layout=layout_shape(config, model))
    comm_slowdown = 0.0
    if profile is not None:
        compute, comm_slowdown, provenance = apply_profile(config, profile, model, compute, precision, topology,
                                                           gpu)
    else:
        provenance = preset_provenance(config, gpu, topology)
    if config.parallelism.layout_active:
        if seen is not None:
            seen.update(model=model, gpu=gpu, topology=topology)
        return with_model_error(predict_layout(config, topology=topology, gpu=gpu, model=model, precision=precision,
                                               compute=compute, collectives=collectives, provenance=provenance,
                                               comm_slowdown=comm_slowdown, profile=profile, seen=seen),
                                model=model, gpu=gpu, topology=topology)

    if shm_after_backward(config, topology):
        provenance = replace(provenance, overlap=replace(provenance.overlap, detail=(
            f"{provenance.overlap.detail}; DDP's all-reduce after backward: the GPUs talk through NCCL's SHM "
            f"transport (node.p2p false) and {topology.spec.name!r} does not set node.shm_overlaps_backward: true")))
    plan = memoized(
        build_step_program, config.parallelism.strategy, model, _offloaded_step(config, compute, model, topology, precision),
        precision=precision, n_gpus=topology.n_gpus,
        gpus_per_node=topology.gpus_per_node, grad_accum=config.micro_batches,
        checkpointing=config.execution.checkpointing, overlap=gradient_overlap(config, topology),
        bucket_cap_mb=config.gradients.bucket_cap_mb, fsdp_unit=config.parallelism.fsdp_unit, **_strategy_kwargs(config, gpu),
        **_ddp_kwargs(config, gpu, profile))
    program = plan.program
    sim = play_program(program, collectives, steps=config.workload.steps, overlap_slowdown=config.calibration.overlap_slowdown,
                       comm_slowdown=comm_slowdown)
    if comm_slowdown > 0:
        collectives = PlayedCollectives(collectives, played_durations(program, sim))
    if profile is not None:
        provenance = provenance.with_bucket_warnings(profile, topology, [c.size_bytes for c in program.comms])
    n = len(sim.steps)
    mean = lambda attr: sum(getattr(s, attr) for s in sim.steps) / n
    step_time = mean("step_time_s")
    charged_s, provenance = charge_after_comm(provenance, mean("exposed_comm_s"))
    step_time += charged_s
    k = config.micro_batches
    # The one-GPU step runs the same micro-batches (and recompute), unsharded optimizer, and none
    # of the strategy's own work (DDP's bucket copies and hooks).
    single_step = (sum(t.duration_s for t in program.tasks if t.kind != "optimizer") + compute.optimizer_s
                   - plan.framework_s)
    one_gpu_step = single_step * one_gpu_compute_ratio(config, profile)
    loader_rate = config.workload.input_samples_per_s
    input_step = config.workload.micro_batch * k / loader_rate if loader_rate else None
    input_bound = input_step is not None and input_step > step_time
    if input_step is not None:  # the loader runs ahead (prefetch): a step is never shorter than loading it
        step_time = max(step_time, input_step)
        single_step = max(single_step, input_step)
        one_gpu_step = max(one_gpu_step, input_step)
    samples = config.workload.micro_batch * k * topology.n_gpus / step_time
    single = config.workload.micro_batch * k / one_gpu_step
    memory, advice = memory_with_advice(model, gpu, config, precision, topology)
    if gpu.name == "cpu":  # a CPU profile's ranks: no CUDA context, workspaces or NCCL buffers
        memory = replace(memory, overhead_bytes=0.0)
    links = link_report(collectives.world, [(c.op, c.size_bytes) for c in program.comms if c.group == "world"],
                        step_time)
    peak = (gpu.peak_flops_per_s.get(precision.compute_dtype) or max(gpu.peak_flops_per_s.values())
            if gpu.peak_flops_per_s else None)  # a CPU has no peak to quote an MFU against
    if profile is None:
        sensitivity = _transport_sensitivity(config, topology, degradations=degradations, model=model,
                                             step_time_s=step_time)
        if sensitivity is not None:
            provenance = replace(provenance, transport_sensitivity=sensitivity)
    if seen is not None:
        def memory_at(other: PredictConfig):
            at, fit = memory_with_advice(model, gpu, other, precision, topology)
            return None, (replace(at, overhead_bytes=0.0) if gpu.name == "cpu" else at), fit
        seen.update(model=model, gpu=gpu, topology=topology, memory_at=memory_at)
    return with_model_error(Prediction(
        config=config,
        topology=topology.spec.name,
        gpu=gpu.name,
        n_gpus=topology.n_gpus,
        n_nodes=topology.n_nodes,
        model=model.name,
        param_count=model.param_count,
        tokens_per_sample=model.tokens_per_sample,
        step_time_s=step_time,
        forward_s=mean("forward_s"),
        backward_s=mean("backward_s"),
        optimizer_s=mean("optimizer_s"),
        compute_s=single_step,
        comm_s=mean("comm_s"),
        exposed_comm_s=mean("exposed_comm_s"),
        samples_per_s=samples,
        tokens_per_s=samples * model.tokens_per_sample if model.tokens_per_sample else None,
        single_gpu_samples_per_s=single,
        scaling_efficiency=samples / (topology.n_gpus * single),
        mfu=compute.flops_per_step * k / step_time / peak if peak else None,
        n_buckets=plan.n_buckets,
        gradient_bytes=int(plan.gradient_bytes),
        ring=gradient_collective(program, plan.gradient_ops, collectives),
        memory=memory,
        simulation=sim,
        program=program,
        collectives=collectives,
        strategy=config.parallelism.strategy,
        comm_bytes_by_op=plan.bytes_by_op,
        fit=advice,
        links=links,
        provenance=provenance,
        ddp=_ddp_report(config, plan, collectives, gpu, profile, model, compute, precision, topology,
                        comm_slowdown),
        input_step_s=input_step,
        input_bound=input_bound,
    ), model=model, gpu=gpu, topology=topology)


def with_model_error(prediction: Prediction, *, model: ModelSpec, gpu, topology: Topology) -> Prediction:
    """``prediction`` with its model-error interval (:mod:`dpsim.predict.model_error`): compute
    measured (a profile's step or ``--single-gpu-step-ms``) or modelled, layout or data parallelism."""
    provenance = prediction.provenance
    measured = provenance is not None and provenance.compute.source != "model"
    par = prediction.config.parallelism
    regime = regime_of(model=model, gpu=gpu, topology=topology, n_gpus=topology.n_gpus, measured_compute=measured,
                       layout=prediction.config.parallelism.layout_active,
                       exposed_share=prediction.exposed_comm_s / prediction.step_time_s if prediction.step_time_s > 0
                       else 0.0,
                       message_bytes=prediction.gradient_bytes / max(1, prediction.n_buckets),
                       kind=layout_kind(model, tp=par.tp, pp=par.pp, cp=par.cp),
                       sharded=par.strategy in SHARDED_STRATEGIES, features=query_features(prediction.config, model))
    return replace(prediction, model_error=model_error_interval(prediction.step_time_s, regime))


def _offloaded_step(config: PredictConfig, compute: ComputeProfile, model: ModelSpec, topology: Topology,
                    precision) -> ComputeProfile:
    """``compute`` with the optimizer step an ``--offload`` runs on the host (:func:`host_step_s` of
    the rank's shard), scaled by ``param_count / shard`` as the strategies charge a shard's step."""
    if config.execution.offload == "off":
        return compute
    n = topology.n_gpus
    shard = -(-model.param_count // n)
    fetches = param_fetches(config.execution.offload, config.execution.checkpointing.mode == "full")
    step = host_step_s(shard, min(topology.gpus_per_node, n), topology.spec.node, precision.weight_bytes,
                       grad_bytes=precision.grad_bytes, param_fetches=fetches,
                       host_bytes=host_bytes_per_param(config.parallelism.strategy))
    return replace(compute, optimizer_s=step * model.param_count / shard)


def _strategy_kwargs(config: PredictConfig, gpu) -> dict:
    """``build_step_program``'s FSDP and checkpointing arguments beyond the policy: the FSDP API
    and accumulation, and the GPU and micro-batch op-level recomputation is costed at."""
    return {"fsdp_version": config.parallelism.fsdp_version, "fsdp_accumulate": config.parallelism.fsdp_accumulate,
            "zero_impl": config.parallelism.zero_impl, "zero_group": config.parallelism.zero_group,
            "micro_batch": config.workload.micro_batch, "compute_gpu": gpu}


def _ddp_kwargs(config: PredictConfig, gpu, profile) -> dict:
    """``build_step_program``'s DDP arguments: the options, and the device DDP's own kernels are
    costed on (none for one GPU: a one-GPU job is not wrapped in DDP).

    With a calibration profile that measured a copy bandwidth (a CPU profile's device, or a
    GPU's measured memcpy), that bandwidth is already what a copy reaches: efficiency 1. The
    measured step never holds DDP's work: ``dpsim calibrate`` and ``dpsim validate`` time the
    bare model (:func:`dpsim.measure.trainstep.measure_step`), not the DDP-wrapped one.
    """
    if config.parallelism.strategy != "ddp":
        return {}
    measured = profile is not None and profile.compute is not None and profile.compute.memory_bandwidth_bytes_per_s
    return {"ddp": config.gradients.ddp_options(), "gpu": None if config.cluster.gpus == 1 else gpu,
            "efficiencies": Efficiencies(memory=1.0) if measured else None}


def shm_after_backward(config: PredictConfig, topology: Topology) -> bool:
    """DDP's gradient all-reduce is charged after backward although ``--overlap`` asks for overlap:
    the servers' GPUs talk through NCCL's SHM transport and the topology does not say it overlaps
    (:func:`~dpsim.topology.spec.ddp_allreduce_after_backward` has the evidence). Plain DDP only:
    the logs behind the rule are torch and apex DDP; ZeRO, FSDP and tensor/pipeline layouts keep
    their overlap."""
    return (config.gradients.overlap and config.parallelism.strategy == "ddp"
            and not config.parallelism.layout_active
            and ddp_allreduce_after_backward(topology.spec.node, topology.gpus_per_node))


def gradient_overlap(config: PredictConfig, topology: Topology) -> bool:
    """Whether the step's gradient communication overlaps backward: ``--overlap``, unless
    :func:`shm_after_backward`."""
    return config.gradients.overlap and not shm_after_backward(config, topology)


def _ddp_report(config: PredictConfig, plan, collectives, gpu, profile, model, compute, precision, topology,
                comm_slowdown: float) -> dict | None:
    """``predict --json``'s ``ddp`` block: DDP's own time per step by part, the bytes a comm hook
    saves and, for PowerSGD, the step of its warm-up (plain all-reduce) before ``--powersgd-start-iter``."""
    if config.parallelism.strategy != "ddp":
        return None
    parts = dict(plan.framework_parts_s)
    reduced = plan.reduced_bytes if plan.reduced_bytes is not None else plan.gradient_bytes
    warmup_s = None
    options = config.gradients.ddp_options()
    if options.comm_hook == "powersgd":
        warm = memoized(
            build_step_program, config.parallelism.strategy, model, compute, precision=precision, n_gpus=topology.n_gpus,
            gpus_per_node=topology.gpus_per_node, grad_accum=config.micro_batches,
            checkpointing=config.execution.checkpointing, overlap=gradient_overlap(config, topology),
            bucket_cap_mb=config.gradients.bucket_cap_mb, fsdp_unit=config.parallelism.fsdp_unit,
            **_strategy_kwargs(config, gpu),
            **{**_ddp_kwargs(config, gpu, profile), "ddp": options.warmup()})
        sim = play_program(warm.program, collectives, steps=config.workload.steps,
                           overlap_slowdown=config.calibration.overlap_slowdown, comm_slowdown=comm_slowdown)
        warmup_s = sum(s.step_time_s for s in sim.steps) / len(sim.steps)
    return {
        "bucket_copies_s": parts.get("bucket_copies", 0.0),
        "comm_hook_s": parts.get("comm_hook", 0.0),
        "host_s": parts.get("host", 0.0),
        "reduced_bytes": reduced,
        "communicated_bytes": plan.gradient_bytes,
        "compression_ratio": reduced / plan.gradient_bytes if plan.gradient_bytes else None,
        "warmup_steps": options.powersgd_start_iter if options.comm_hook == "powersgd" else 0,
        "warmup_step_time_s": warmup_s,
    }
def _transport_sensitivity(config: PredictConfig, topology: Topology, *, degradations, model: ModelSpec,
                           step_time_s: float) -> TransportSensitivity | None:
    """The step at :data:`SENSITIVITY_FACTORS` times the NIC efficiency, when that efficiency
    comes from an ``assumed`` transport (not measured, not written in the topology file) and the
    job crosses NICs; ``None`` otherwise."""
    fabric = topology.spec.fabric
    if (not nic_fabric(fabric) or topology.n_nodes < 2 or fabric.efficiency_given
            or not fabric.transport.assumed):
        return None
    used = fabric.nic_efficiency
    points = [SensitivityPoint(nic_efficiency=used, step_time_s=step_time_s, used=True)]
    for factor in SENSITIVITY_FACTORS:
        efficiency = min(1.0, used * factor)
        if efficiency == used:
            continue
        # Written as if in the file: the other prediction shows no sensitivity of its own.
        spec = replace(topology.spec, fabric=replace(fabric, nic_efficiency=efficiency, efficiency_given=True))
        other = predict(config, degradations=degradations, model=model,
                        topology=Topology(spec=spec, n_gpus=topology.n_gpus))
        points.append(SensitivityPoint(nic_efficiency=efficiency, step_time_s=other.step_time_s, used=False))
    base = fabric.transport.name.split(" ")[0]
    return TransportSensitivity(transport=fabric.transport.name,
                                assumption=TRANSPORT_ASSUMPTION_NOTE.get(base, "its efficiency is assumed"),
                                points=tuple(sorted(points, key=lambda p: p.nic_efficiency)))


def load_model(config: PredictConfig) -> ModelSpec:
    """The config's model: a catalog entry, a shape (``transformer:...``), a transformers
    configuration the catalog builders cover (its shape), or a torch module (``file.py:fn``,
    ``pkg.mod:fn``) traced on the meta device (torch is imported only then)."""
    source = model_source(config)
    if is_torch_model_ref(source):
        model = load_torch_workload(source, input_shape=config.workload.input_shape)
        if not config.execution.flash_attention and _has_attention(model):
            # The trace runs the module's own attention (SDPA, fused, or its eager matmuls): the flag built nothing
            # else, and examples/my_model.py:build predicted the same step with it as without, status 0.
            raise ConfigError(f"--no-flash-attention: applies to a model dpsim builds (a catalog model or a shape), "
                              f"not to a traced torch module (--model {config.workload.model}), whose own modules "
                              f"say how it attends; leave --no-flash-attention out")
    else:
        if is_config_json_ref(source):
            # Its shape, read from the file now: keyed by the path, the memo kept the model of the file as it was
            # first read, and a config.json edited between two predictions in one process (a notebook, a sweep's
            # file re-run) predicted the old model. A topology file is keyed by its contents likewise.
            source = shape_ref_of_config_json(source)
        model = memoized(get_model, source, seq_len=config.workload.seq_len,
                         flash_attention=config.execution.flash_attention, mtp_depth=config.workload.mtp_depth)
    kernel = config.execution.attention_kernel
    check_attention_flags_apply(model, config)
    return counted_model(model if kernel == "sdpa" else memoized(with_attention_kernel, model, kernel), config)


def check_attention_flags_apply(model: ModelSpec, config: PredictConfig) -> None:
    """Refuse ``--attention-kernel`` and ``--no-flash-attention`` on a model with no attention (a CNN, an MLP):
    they change only attention ops, so on resnet50 both were taken and predicted the same step in silence."""
    e = config.execution
    flag = (f"--attention-kernel: {e.attention_kernel!r}" if e.attention_kernel != "sdpa"
            else "--no-flash-attention:" if not e.flash_attention else None)
    # The default flags (every prediction of a sweep or a plan) skip the scan of the model's ops.
    if flag is not None and not _has_attention(model):
        name = flag.partition(":")[0]
        raise ConfigError(f"{flag} applies to attention, but --model {config.workload.model} has "
                          f"{count(len(model.layers), 'layer')}, none of them attention; leave {name} out")


def _has_attention(model: ModelSpec) -> bool:
    return any(isinstance(op, AttentionOp) for layer in model.layers for op in layer.ops)


def counted_model(model: ModelSpec, config: PredictConfig) -> ModelSpec:
    """``model`` keeping for backward what ``--activations`` says its framework keeps
    (:func:`dpsim.workload.layers.with_activation_count`): predict, memory, sweep, goodput and plan all
    reach it through :func:`load_model` or :func:`predict`."""
    return memoized(with_activation_count, model, config.execution.activations)


def memory_with_advice(model: ModelSpec, gpu, config: PredictConfig, precision, topology: Topology
                       ) -> tuple[MemoryBreakdown, FitAdvice]:
    """Per-GPU memory of ``config``'s strategy, with the fit advice in ``suggestion`` when it does not fit."""
    from dataclasses import replace

    kwargs = _memory_kwargs(config, precision, topology)
    memory = memoized(memory_breakdown, model, gpu, **kwargs)
    advice = memoized(fit_advice, model, gpu, **kwargs)
    if config.execution.offload != "off":
        # ZeRO's gathered units and gradient buckets are among the buffers already; the shards go.
        memory = offload_memory(memory, config.execution.offload)
        if memory.fits:
            advice = FitAdvice(fits=True, total_bytes=memory.total_bytes, message="fits")
    if not memory.fits:
        memory = replace(memory, suggestion=advice.message)
    return memory, advice


def strategy_memory(model: ModelSpec, gpu, config: PredictConfig, precision, topology: Topology) -> MemoryBreakdown:
    """Per-GPU memory of ``config``'s data-parallel strategy, as :func:`memory_with_advice` gives it,
    without the advice (``plan`` needs only the total)."""
    return memoized(memory_breakdown, model, gpu, **_memory_kwargs(config, precision, topology))


def _memory_kwargs(config: PredictConfig, precision, topology: Topology) -> dict:
    par = config.parallelism
    return {"precision": precision, "optimizer": config.workload.optimizer, "micro_batch": config.workload.micro_batch,
            "strategy": par.strategy, "n_gpus": topology.n_gpus, "gpus_per_node": topology.gpus_per_node,
            "checkpointing": config.execution.checkpointing, "grad_accum": config.micro_batches,
            "fsdp_unit": par.fsdp_unit, "overlap": config.gradients.overlap, "bucket_cap_mb": config.gradients.bucket_cap_mb,
            "fsdp_version": par.fsdp_version, "fsdp_accumulate": par.fsdp_accumulate,
            "zero_impl": par.zero_impl, "zero_group": par.zero_group, "loss_impl": config.execution.loss_impl,
            "ddp": config.gradients.ddp_options() if par.strategy == "ddp" else None}


def memory_for_config(config: PredictConfig) -> tuple[MemoryBreakdown, FitAdvice, ModelSpec, Topology]:
    """Memory per GPU for ``config`` without simulating a step (``dpsim memory``); a calibration
    profile's defaults apply as in :func:`predict`."""
    return _memory(resolve(config).config)


def _memory(config: PredictConfig) -> tuple[MemoryBreakdown, FitAdvice, ModelSpec, Topology]:
    topology = resolve_topology(config)
    gpu = get_gpu(topology.spec.gpu)
    model = load_model(config)
    precision = checked_precision(config, model, gpu)
    if config.parallelism.layout_active:
        check_layout(config, model, topology)
        memory, advice = layout_fit(layout_memory(config, model, gpu, precision), config)
        return memory, advice, model, topology
    memory, advice = memory_with_advice(model, gpu, config, precision, topology)
    return memory, advice, model, topology


@checked_arguments("dpsim.memory_report", config_settings=SETTINGS)
def memory_report(config: PredictConfig) -> MemoryReport:
    """:func:`memory_for_config` as a result (``dpsim memory``). ``--rack-placement`` cannot change the memory
    per GPU: it is ignored, as ``memory`` ignores every flag that only moves collectives (``--jobs``,
    ``--algo``), except that a ``contiguous`` that ``predict`` refuses for the same job (it would change nothing
    there either) is refused here too, in the same line, and so are ``--algo``/``--proto``/``--jobs`` beside
    ``--calibration`` (:func:`check_collective_flags_with_profile`; memory took them where predict refused)."""
    config = resolve(config).config
    if config.calibration.profile is not None:
        check_collective_flags_with_profile(config)
    memory, advice, model, topology = _memory(config)
    if config.cluster.rack_placement == "contiguous":
        _check_rack_placement(topology, groups=has_placeable_group(config.parallelism, topology.n_gpus),
                              jobs=config.cluster.jobs)
    return MemoryReport(config=config, model=model.name, param_count=model.param_count, gpu=topology.spec.gpu,
                        n_gpus=topology.n_gpus, gpus_per_node=topology.gpus_per_node, memory=memory, advice=advice)
