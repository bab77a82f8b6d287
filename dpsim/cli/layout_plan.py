"""``dpsim plan``: search tensor x pipeline x data layouts that fit and rank them by time to train, cost,
or expected time to train through failures (``--rank goodput``, with ``dpsim goodput``'s failure flags).
"""

from __future__ import annotations

from typing import Any, Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.checks import warn_other_gpu
from dpsim.cli.failures import CHECKPOINT_BANDWIDTH, MTBF_GPU, MTBF_LINK, MTBF_NODE, REPLACE, RESTART, failure_rates
from dpsim.cli.options import config_options
from dpsim.cli.panels import BUDGET, OUTPUT, SEARCH, VARIABILITY
from dpsim.wording import canonical_choice

PLAN_FIELDS = ("link", "topology_file", "gpus_per_node", "gpu", "model", "seq_len", "input_shape", "mtp_depth",
               "flash_attention",
               "attention_kernel", "activations",
               "precision", "fp8", "fp8_params", "compile",
               "optimizer", "bucket_cap_mb", "overlap", "overlap_slowdown", "compute_efficiency", "global_batch",
               "tp_comm_overlap", "tp_across_network", "grad_accum_fusion", "algo", "proto", "cp_comm", "moe_routing",
               "calibration", "moe_a2a_overlap", "cp_balance", "moe_a2a", "moe_capacity_factor", "moe_node_limit",
               "rack_placement", "moe_pad_to_capacity")
"""``PredictConfig`` fields that describe the job the layouts are searched for (the layout fields
themselves are what ``plan`` searches)."""


@config_options(PLAN_FIELDS)
def plan_command(
    flags: dict[str, Any],
    gpus: str = typer.Option(..., "--gpus", help="GPU counts to search, comma-separated (e.g. 256,512,1024).",
                             rich_help_panel=SEARCH),
    tp: Optional[str] = typer.Option(None, "--tp", help="Tensor-parallel sizes to search (default: every size "
                                                         "that fits an NVLink domain and divides the heads).",
                                     rich_help_panel=SEARCH),
    pp: Optional[str] = typer.Option(None, "--pp", help="Pipeline stages to search (default: every divisor of the "
                                                         "model's blocks).", rich_help_panel=SEARCH),
    cp: Optional[str] = typer.Option(None, "--cp", help="Context-parallel sizes to search (default: 1,2,4,8 for a "
                                                         "sequence of 16K tokens or more, else 1).",
                                     rich_help_panel=SEARCH),
    ep: Optional[str] = typer.Option(None, "--ep", help="Expert-parallel sizes to search for a mixture of experts "
                                                         "(default: every divisor of its experts).",
                                     rich_help_panel=SEARCH),
    etp: Optional[str] = typer.Option(None, "--etp", help="Expert-tensor-parallel sizes to search for a mixture of "
                                                           "experts (default: predict's, --tp with --ep 1, else 1).",
                                      rich_help_panel=SEARCH),
    # The three name lists default to None ("not given"): the library searches its own defaults then, and
    # blames a list only when the user gave it (--pp 1 --schedules 1f1b,1f1b-interleaved was let through
    # because the default pair, always passed, could not be told from the same pair given).
    strategies: Optional[str] = typer.Option(None, "--strategies",
                                             help="Data-parallel strategies to search: ddp, zero1, fsdp, zero3 "
                                                  "(without --pp or --ep; with data parallelism alone also MiCS, "
                                                  "every whole-server --zero-group), fsdp-hybrid (data parallelism alone, "
                                                  "every whole-server shard group; named here, also under --tp/--pp/--cp) (default: "
                                                  "ddp,zero1,zero3,fsdp-hybrid, each where it applies).",
                                             rich_help_panel=SEARCH),
    micro_batches: Optional[str] = typer.Option(None, "--micro-batches",
                                                help="Micro-batch sizes to search (default 1,2,4,8,16).",
                                                rich_help_panel=SEARCH),
    recompute: Optional[str] = typer.Option(None, "--recompute",
                                            help="Recomputation modes to search: off, selective, full, and the "
                                                 "layout path's op, megatron, moe (default: off,selective,full).",
                                            rich_help_panel=SEARCH),
    schedules: Optional[str] = typer.Option(None, "--schedules",
                                            help="Pipeline schedules to search: 1f1b, 1f1b-interleaved, gpipe, "
                                                 "zb-h1, dualpipe, for the layouts with pipeline stages (default: "
                                                 "1f1b,1f1b-interleaved, and dualpipe with --moe-a2a-overlap for a "
                                                 "mixture of experts with ep > 1; refused with --pp 1 alone).",
                                            rich_help_panel=SEARCH),
    sequence_parallel: Optional[bool] = typer.Option(
        None, "--sequence-parallel/--no-sequence-parallel",
        help="Only with (or only without) sequence parallelism; default: both.", rich_help_panel=SEARCH),
    tokens: Optional[str] = typer.Option(None, "--tokens", help="Token budget to train, e.g. 1T: ranks by time and "
                                                                "cost to train it.", rich_help_panel=BUDGET),
    samples: Optional[str] = typer.Option(None, "--samples", help="Sample budget instead (image models).",
                                          rich_help_panel=BUDGET),
    budget_usd: Optional[float] = typer.Option(None, "--budget-usd",
                                               help="Drop layouts whose training would cost more (needs --tokens).",
                                               rich_help_panel=BUDGET),
    gpu_hour_usd: Optional[list[str]] = typer.Option(
        None, "--gpu-hour-usd", metavar="PRICE", help="Price per GPU-hour: 2.5 (every GPU) or h100=2.5 (repeatable).",
        rich_help_panel=BUDGET),
    rank: str = typer.Option("time", "--rank", help="Rank by time (to train, or per sample), by cost, or by "
                                                    "goodput: expected time to train through failures (needs "
                                                    "--tokens; takes the --mtbf-*, --restart, --replace, "
                                                    "--checkpoint-bandwidth, --noise-cv and --straggler flags).",
                             rich_help_panel=OUTPUT),
    top: int = typer.Option(10, "--top", help="Layouts to list.", rich_help_panel=OUTPUT),
    verify: int = typer.Option(64, "--verify", help="Most layouts simulated step by step: best estimate first, every "
                                                    "one whose estimate could still beat the best simulated one "
                                                    "(within the estimate's measured error); the table ranks them "
                                                    "by their simulated time, then the rest by estimate (0: "
                                                    "estimates only).", rich_help_panel=SEARCH),
    verify_seconds: Optional[float] = typer.Option(None, "--verify-seconds", help="Seconds of simulation after the "
                                                   "first layout; the output says how many were simulated and what "
                                                   "stopped it. Left out: no limit but --verify's (the same layouts "
                                                   "simulated, and the same output, on every run); given, which "
                                                   "layouts are simulated depends on the machine's speed and load.",
                                                   rich_help_panel=SEARCH),
    mtbf_gpu: Optional[str] = MTBF_GPU,
    mtbf_node: Optional[str] = MTBF_NODE,
    mtbf_link: Optional[str] = MTBF_LINK,
    checkpoint_bandwidth: str = CHECKPOINT_BANDWIDTH,
    restart: str = RESTART,
    replace_after: str = REPLACE,
    noise_cv: Optional[float] = typer.Option(
        None, "--noise-cv", help="Per-rank, per-step compute-time noise (0.05 = 5 %): each step waits for its "
                                 "slowest rank, which --rank goodput charges to the time to train.",
        rich_help_panel=VARIABILITY),
    straggler: Optional[list[str]] = typer.Option(
        None, "--straggler", help="A persistently slow node or GPU, e.g. node3:1.3x (repeatable), charged like "
                                  "--noise-cv.", rich_help_panel=VARIABILITY),
    degrade: Optional[list[str]] = typer.Option(
        None, "--degrade", help="A link below capacity, as predict takes it (node3.nic0:50%, node0.gpu2:50% or a "
                                "link class such as infiniband:50%; repeatable): every layout is costed with it.",
        rich_help_panel=VARIABILITY),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (schema dpsim.plan/1).",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Search tensor x pipeline x data layouts (tp, pp, dp, strategy, micro-batch, recomputation, schedule;
    cp for a long sequence, ep for a mixture of experts) that fit in memory and rank them by time to train and cost."""
    from dpsim.errors import ConfigError
    from dpsim.limits import MAX_REPEATED_FLAGS
    from dpsim.network.degrade import parse_degradation
    from dpsim.plan.cost import parse_count, parse_price_overrides
    from dpsim.plan.planner import (
        MAX_TOP,
        MAX_VERIFY,
        PLAN_RECOMPUTES,
        PLAN_SCHEDULES,
        RANKINGS,
        parse_choice_list,
        parse_int_list,
        plan_layouts,
    )
    from dpsim.predict.config import PLAN_DP_STRATEGIES, PredictConfig

    global_batch = flags.pop("global_batch", None)
    if global_batch is None:
        raise ConfigError("--global-batch: the layouts are searched for one global batch; give it "
                          "(samples per optimizer step, e.g. --global-batch 1024)")
    if tokens is not None and samples is not None:
        raise ConfigError("--tokens and --samples: give one budget, not both")
    rank = canonical_choice(rank, RANKINGS)
    if rank not in RANKINGS:
        raise ConfigError(f"--rank: {rank!r} is not known; choose one of {', '.join(RANKINGS)}")
    for name, value, low, high in (("--top", top, 1, MAX_TOP), ("--verify", verify, 0, MAX_VERIFY)):
        if not low <= value <= high:
            raise ConfigError(f"{name}: {value} is not valid; expected an integer in [{low}, {high}]")
    if verify_seconds is not None and not 0 <= verify_seconds <= 86_400:
        raise ConfigError(f"--verify-seconds: {verify_seconds} is not valid; expected a number in [0, 86400]")
    if budget_usd is not None and not budget_usd > 0:
        raise ConfigError(f"--budget-usd: {budget_usd} is not valid; expected a number > 0")
    failures = None
    failure_flags = {"--mtbf-gpu": mtbf_gpu, "--mtbf-node": mtbf_node, "--mtbf-link": mtbf_link,
                     "--checkpoint-bandwidth": None if checkpoint_bandwidth == CHECKPOINT_BANDWIDTH.default
                     else checkpoint_bandwidth, "--restart": None if restart == RESTART.default else restart,
                     "--replace": None if replace_after == REPLACE.default else replace_after,
                     "--noise-cv": noise_cv, "--straggler": straggler or None}
    if rank == "goodput":
        from dpsim.plan.layout_goodput import FailureInputs
        from dpsim.plan.reliability import parse_long_duration_s
        from dpsim.units import parse_bandwidth_bytes_per_s
        from dpsim.variability.spec import VariabilitySpec, parse_straggler

        failures = FailureInputs(
            rates=failure_rates(mtbf_gpu, mtbf_node, mtbf_link),
            restart_s=parse_long_duration_s(restart, "--restart"),
            replace_s=parse_long_duration_s(replace_after, "--replace"),
            node_bandwidth_bytes_per_s=parse_bandwidth_bytes_per_s(checkpoint_bandwidth, "--checkpoint-bandwidth"),
            variability=VariabilitySpec(noise_cv=noise_cv or 0.0,
                                        stragglers=tuple(parse_straggler(x) for x in straggler or ())))
    else:
        given = [flag for flag, value in failure_flags.items() if value is not None]
        if given:
            raise ConfigError(f"{given[0]}: applies to --rank goodput only; add --rank goodput or leave it out")
    if degrade and len(degrade) > MAX_REPEATED_FLAGS:
        raise ConfigError(f"--degrade: given {len(degrade):,} times; expected at most {MAX_REPEATED_FLAGS:,}")
    degradations = tuple(parse_degradation(x) for x in degrade or ())
    counts = parse_int_list(gpus, "--gpus")
    # Searched layouts with tensor or pipeline parallelism take it; the base (no --tp/--pp) cannot.
    grad_accum_fusion = flags.pop("grad_accum_fusion", True)
    # Flags that apply to the candidates with tensor, context or expert parallelism; the base has none.
    sharded = {name: flags.pop(name) for name in ("tp_comm_overlap", "tp_across_network", "cp_comm", "cp_balance",
                                                   "moe_a2a_overlap", "moe_node_limit")
               if name in flags}
    base = PredictConfig(**flags, micro_batch=1)
    warn_other_gpu(base)
    result = plan_layouts(
        base, gpus=counts, global_batch=global_batch, tps=parse_int_list(tp, "--tp"), pps=parse_int_list(pp, "--pp"),
        strategies=parse_choice_list(strategies, "--strategies", tuple(PLAN_DP_STRATEGIES)),
        micro_batches=parse_int_list(micro_batches, "--micro-batches"),
        recomputes=parse_choice_list(recompute, "--recompute", PLAN_RECOMPUTES),
        schedules=parse_choice_list(schedules, "--schedules", PLAN_SCHEDULES),
        sequence_parallel=sequence_parallel, cps=parse_int_list(cp, "--cp"), eps=parse_int_list(ep, "--ep"),
        etps=parse_int_list(etp, "--etp"),
        tokens=None if tokens is None else parse_count(tokens, "--tokens"),
        samples=None if samples is None else parse_count(samples, "--samples"),
        budget_usd=budget_usd, gpu_hour_usd=parse_price_overrides(gpu_hour_usd or []), rank_by=rank, top=top,
        verify=verify, verify_seconds=verify_seconds, grad_accum_fusion=grad_accum_fusion, failures=failures,
        degradations=degradations, **sharded)
    if as_json:
        _emit_json(result.to_dict())
        return
    from dpsim.report.layout import print_plan
    print_plan(result, base, global_batch=global_batch)
