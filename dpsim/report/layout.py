"""Human-readable output of tensor x pipeline x data layouts: a prediction's stages and ``dpsim plan``'s ranking.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpsim.limits import VERIFY_WORK
from dpsim.predict.extrapolate import EXTRAPOLATE_ABOVE
from dpsim.predict.provenance import gpu_link_warnings
from dpsim.units import format_bytes, format_bytes_against, format_seconds


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def layout_tables(p) -> list[Table]:
    """Where a layout's step goes (a :class:`~dpsim.predict.layout.LayoutReport`) and its stages."""
    rep = p.layout
    lay = rep.layout
    summary = Table(title=escape(f"layout: {lay.describe()}"), header_style="bold")
    k = rep.critical_stage
    # The critical stage's step (the one whose own work and waits set it): its parts add up to the
    # step, with its tail after its last op where another stage ends the step.
    summary.add_column(f"step of stage {k}" + (" (critical)" if lay.pp > 1 else ""))
    summary.add_column("value", justify="right")
    sk = rep.stages[k]
    compute = sk.busy_s - rep.tp_exposed_s - rep.cp_exposed_s - rep.ep_exposed_s
    tp = f"{format_seconds(rep.tp_exposed_s)} of {format_seconds(rep.tp_comm_s)}"
    bubble = format_seconds(sk.bubble_s)
    if k == 0:
        bubble += f" ({_pct(rep.bubble_fraction)}; ideal {_pct(rep.ideal_bubble_fraction)})"
    else:  # the fraction and the ideal are stage 0's fill and drain
        bubble += f" (stage 0: {_pct(rep.bubble_fraction)}; ideal {_pct(rep.ideal_bubble_fraction)})"
    waits = f"{format_seconds(sk.comm_wait_s)} (they take {format_seconds(sk.dp_comm_s)})"
    rows = [
        ("compute (forward, backward, recompute, optimizer)", format_seconds(compute)),
        ("tensor-parallel collectives waited for", tp),
        ("pipeline bubble (fill, drain, transfers)", bubble),
        ("waiting for its data-parallel collectives", waits),
    ]
    if sk.tail_s > 0:
        rows.append(("done, until another stage ends the step", format_seconds(sk.tail_s)))
    if lay.cp > 1:
        rows.insert(2, ("context-parallel attention transfers waited for",
                        f"{format_seconds(rep.cp_exposed_s)} of {format_seconds(rep.cp_comm_s)}"))
    busiest = max(rep.stages, key=lambda s: s.ep_comm_s + s.etp_comm_s)
    if rep.ep_comm_s + rep.etp_comm_s > 0:
        rows.insert(2, ("expert-parallel all-to-alls waited for",
                        f"{format_seconds(rep.ep_exposed_s)} of {format_seconds(rep.ep_comm_s + rep.etp_comm_s)}"))
    elif busiest.ep_comm_s + busiest.etp_comm_s > 0:
        # The critical stage holds only dense blocks (DeepSeek-V3's first three with many stages): say where they are.
        rows.insert(2, ("expert-parallel all-to-alls waited for",
                        f"none on stage {k} (stage {busiest.stage} waits "
                        f"{format_seconds(busiest.ep_comm_s + busiest.etp_comm_s)})"))
    if rep.expert_load is not None and rep.expert_load.dropped_fraction > 0:
        # Only the JSON said so: --moe-capacity-factor 0.01 printed an MFU of 106 % (FLOPs of the dropped
        # tokens' expert GEMMs are in the model's count, not in the step) with no word of the drops.
        rows.append(("(token, expert) pairs dropped at expert capacity",
                     f"{_pct(rep.expert_load.dropped_fraction)} (MFU still counts their FLOPs)"))
    if lay.pp > 1:
        p2p = f"{format_bytes(rep.p2p_bytes)} per GPU in {format_seconds(rep.p2p_s)}, {rep.transfers} per step"
        rows.append(("point-to-point transfer", p2p))
    for name, value in rows:
        summary.add_row(name, value)
    stages = Table(title="pipeline stages" if lay.pp > 1 else "the stage", header_style="bold")
    for col in ("stage", "blocks", "fwd / micro-batch", "bwd / micro-batch", "busy", "bubble", "in flight",
                "model state", "activations", "memory / GPU"):
        stages.add_column(col, justify="right")
    shown = rep.stages if len(rep.stages) <= 12 else rep.stages[:6] + rep.stages[-6:]
    for s in shown:
        mem = s.memory.breakdown
        mark = "" if mem.fits else " [bold red]OOM[/bold red]"
        stages.add_row(str(s.stage), str(s.blocks), format_seconds(s.forward_s), format_seconds(s.backward_s),
                       format_seconds(s.busy_s), format_seconds(s.bubble_s), "+".join(map(str, s.memory.in_flight)),
                       format_bytes(mem.model_state_bytes), format_bytes(mem.activations_bytes),
                       format_bytes(mem.total_bytes) + mark)
    return [summary, stages]


def _usd(x: float) -> str:
    return f"${x / 1e6:,.2f}M" if x >= 1e6 else f"${x:,.0f}"


def _short(c) -> str:
    """``512: tp4 cp2 pp4 dp16 ep8 i10 zero1 mb1 sel sp`` (GPUs, sizes, interleaved chunks, strategy (``hsdpN``:
    fsdp-hybrid over N-rank shard groups, ``micsN``: zero3 over them),
    micro-batch, recomputation, sequence parallelism; cp and ep when above 1)."""
    cp = f" cp{c.cp}" if c.cp > 1 else ""
    ep = f" ep{c.ep}" if c.ep > 1 else ""
    parts = [f"{c.gpus}: tp{c.tp}{cp} pp{c.pp} dp{c.dp}{ep}"]
    if c.pp > 1 and c.virtual_stages > 1:
        parts.append(f"i{c.virtual_stages}")
    elif c.pp > 1 and c.schedule in ("gpipe", "zb-h1"):
        parts.append({"gpipe": "gpipe", "zb-h1": "zb"}[c.schedule])
    # HSDP's and MiCS's shard group (``hsdp16``: fsdp-hybrid over 16-rank groups; ``mics16``: zero3 over them),
    # short enough for the table's column.
    label = {"fsdp-hybrid": "hsdp", "zero3": "mics"}.get(c.strategy) if c.zero_group else None
    parts += [f"{label}{c.zero_group}" if label else c.strategy, f"mb{c.micro_batch}"]
    if c.recompute != "off":
        parts.append({"selective": "sel"}.get(c.recompute, c.recompute))  # op, megatron, moe as they are
    if c.sequence_parallel:
        parts.append("sp")
    return " ".join(parts)


def _failure_cells(e, failures: bool) -> tuple[str, ...]:
    """The ``--rank goodput`` columns of a layout (none without them)."""
    if not failures:
        return ()
    r = e.reliability
    if r is None:
        return ("-",) * 6
    cost = e.expected_cost_usd
    if not r.expected_wall_s < float("inf"):  # fails faster than it restarts: never done
        return (format_seconds(r.checkpoint.write_s), "never", _pct(0.0), "-", "-", "-")
    return (format_seconds(r.checkpoint.write_s), _days(r.expected_wall_s), _pct(r.goodput),
            format_seconds(r.interval_s), f"{r.spares} ({r.spare_gpus} GPUs)", "-" if cost is None else _usd(cost))


def _print_recommendation(console: Console, r) -> None:
    """The winner's checkpoint interval and spares, and what they rest on."""
    ck = r.checkpoint
    if not r.expected_wall_s < float("inf"):
        console.print(f"[bold red]through failures: never done[/bold red]: the job fails every "
                      f"{format_seconds(r.mtbf_s)}, restarts in {format_seconds(r.restart_s)}; give longer MTBFs")
        return
    who = f"every rank writes its shard ({ck.writers} ranks)" if ck.sharded else \
        f"one replica writes it ({ck.writers} rank{'s' if ck.writers != 1 else ''})"
    console.print(
        f"through failures: a failure stops all {r.blast_radius_gpus} GPUs; job MTBF {format_seconds(r.mtbf_s)}; "
        f"checkpoint {format_bytes(ck.state_bytes)}, {who}, busiest node {format_bytes(ck.node_bytes)}: write "
        f"{format_seconds(ck.write_s)}, restart {format_seconds(r.restart_s)} (read included)")
    if r.straggler_tail != 1.0:
        console.print(f"straggler tail: each step's compute waits for its slowest of {r.blast_radius_gpus} ranks, "
                      f"{r.straggler_tail:.3f}x on average (in the time to train)")
    console.print(
        f"recommended: checkpoint every {format_seconds(r.interval_s)} (Young sqrt(2CM) {format_seconds(r.young_s)}, "
        f"Daly {format_seconds(r.daly_s)}), {r.spares} spare node{'s' if r.spares != 1 else ''} "
        f"({r.spare_gpus} GPUs): expected {_days(r.expected_wall_s)} to train, goodput {_pct(r.goodput)} "
        f"({_days(r.expected_wall_no_spares_s)} without spares)")


def _days(seconds: float, places: int = 2) -> str:
    """Days, written out up to a million; past that in powers of ten: a layout failing every second
    printed a 300-digit "expected 7,973,...,240.00 d to train"."""
    days = seconds / 86400
    return f"{days:,.{places}f} d" if days < 1e6 else f"{days:.3g} d"


def _verification_line(result) -> str:
    """How many layouts were simulated, and why no more: the table's ``*`` and ``~`` rows."""
    v = result.verification
    if not v:
        return "* simulated step by step, with its p10-p90 model error; ~ closed-form estimate."
    low, high = v["bound"]
    why = {"bound": "no other estimate could beat the best simulated one",
           "count": "--verify reached", "time": "--verify-seconds reached",
           # Named with its size: what the user changes to get the next layouts simulated.
           # Past 512 micro-batches per replica a prediction simulates a few sampled counts whatever the
           # batch (dpsim/predict/extrapolate.py): fewer micro-batches help only below that.
           "work": f"the next would pass the simulation budget of {VERIFY_WORK:,.0f} pipeline slots, stages x "
                   f"chunks x micro-batches simulated: a smaller global batch or more GPUs have fewer micro-batches "
                   f"(past {EXTRAPOLATE_ABOVE} per replica, a few sampled ones whatever the batch)",
           "none": "--verify 0" if result.ranked else
           "nothing within --budget-usd" if result.counts.get("over_budget") else "nothing fits"}[v["stopped_by"]]
    left = v["within_bound"] - v["simulated"]
    n = v["simulated"]
    return (f"* simulated step by step (ranked by it, p10-p90 model error in brackets): {n} layout{'s' * (n != 1)} in "
            f"this search ({why}{f'; {left} more could have' if left > 0 else ''}); ~ closed-form "
            f"estimate only (within {low:.2f}x-{high:.2f}x of its simulation, measured), ranked after them.")


def print_plan(result, base, *, global_batch: int, console: Console | None = None) -> None:
    """``dpsim plan``'s table, the chosen layout's breakdown and the search's counts."""
    console = console or Console(width=max(Console().width, 110))
    counts = result.counts
    title = (f"{base.workload.model}: layouts for a global batch of {global_batch} "
             f"({counts['ranked']} fit of {counts['candidates']})")
    table = Table(title=escape(title), header_style="bold")
    tokens = any(e.tokens_per_s for e in result.ranked)
    failures = any(e.reliability is not None for e in result.ranked)
    cols = ["#", "layout", "step", "tokens/s" if tokens else "samples/s", "MFU", "memory/GPU", "to train", "cost"]
    if failures:
        cols += ["ckpt write", "through failures", "goodput", "ckpt every", "spares", "expected cost"]
    for col in cols:
        # The rank keeps room for its mark (* simulated, ~ estimated) when a narrow terminal squeezes the table.
        table.add_column(col, justify="left" if col == "layout" else "right", no_wrap=True,
                         min_width=len(str(len(result.ranked))) + 1 if col == "#" else None)
    for i, e in enumerate(result.ranked, 1):
        table.add_row(
            f"{i}{'*' if e.verified is not None else '~'}", escape(_short(e.candidate)),
            (format_seconds(e.step_time_s) if e.verified is not None else f"~{format_seconds(e.step_time_s)} est.")
            + ("" if e.model_error is None else f" ({format_seconds(e.model_error.low_s)} - "
                                                f"{format_seconds(e.model_error.high_s)})"),
            f"{e.tokens_per_s:,.0f}" if tokens and e.tokens_per_s else f"{e.samples_per_s:,.1f}",
            "-" if e.mfu is None else _pct(e.mfu), format_bytes(e.memory_bytes),
            "-" if e.time_to_train_s is None else _days(e.time_to_train_s, 1),
            "-" if e.cost_usd is None else _usd(e.cost_usd), *_failure_cells(e, failures))
    console.print(table)
    console.print("layout: GPUs: tensor (x cpN context) x pipeline x data sizes (epN: N expert-parallel), "
                  "iN = interleaved with N chunks per stage, "
                  "data-parallel strategy (hsdpN: fsdp-hybrid, N-rank shard groups; micsN: zero3 over them), micro-batch, sel/full/op/megatron/moe = recomputation, "
                  "sp = sequence parallelism")
    console.print(_verification_line(result))
    if result.degradations:
        console.print(f"every layout costed with degraded links: "
                      f"{escape(', '.join(d.label for d in result.degradations))}")
    console.print(f"Refused: "
                  f"{counts['do_not_fit']} do not fit in memory, {counts['refused_by_placement']} cannot be placed"
                  + "".join(f" ({n} of them need {lc} measurements, which --calibration has none of)"
                            for lc, n in result.uncalibrated.items())
                  + (f", {counts['over_budget']} over budget" if counts.get("over_budget") else "")
                  + (f", {counts['no_fp8_params']} with a strategy that cannot hold FP8 primary weights "
                     f"(--fp8-params: ddp, zero3, FSDP1)" if counts.get("no_fp8_params") else ""))
    # --gpu of another generation than the --topology file's links: every layout was costed on those
    # links, which predict warns of among its sources.
    for warning in gpu_link_warnings(base):
        console.print(f"[bold yellow]warning[/bold yellow]: {escape(warning)}")
    best = result.best
    if best is None:
        near = result.best_memory
        need, usable = format_bytes_against(near.memory_bytes, near.usable_bytes) if near is not None else ("", "")
        hint = f"; closest: {escape(near.candidate.flags())} needs {need} of {usable} usable" if near is not None else ""
        if counts.get("over_budget"):
            # It said "no layout fits; add GPUs" when every layout fitted but cost more than --budget-usd, then
            # named the layout closest to fitting in memory (one that does not fit): the cheapest is the answer.
            cheapest = (f" (the cheapest: {escape(near.candidate.flags())} at {_usd(near.cost_usd)})"
                        if near is not None and near.cost_usd is not None else "")
            console.print(f"[bold red]no layout is within --budget-usd[/bold red]: {counts['over_budget']:,} fit in "
                          f"memory but cost more{cheapest}; raise the budget or lower --tokens/--samples")
            return
        console.print(f"[bold red]no layout fits[/bold red]{hint}; add GPUs, or allow more tensor parallelism")
        return
    console.print(f"best: {escape(best.candidate.command(base, result.degradations))}")
    if best.reliability is not None:
        _print_recommendation(console, best.reliability)
    pred = best.verified
    if pred is not None and pred.layout is not None:
        for t in layout_tables(pred):
            console.print(t)
        m = pred.memory
        console.print(f"memory per GPU (fullest stage): weights {format_bytes(m.weights_bytes)}, gradients "
                      f"{format_bytes(m.gradients_bytes)}, optimizer {format_bytes(m.optimizer_bytes)}, activations "
                      f"{format_bytes(m.activations_bytes)}, overhead {format_bytes(m.overhead_bytes)}: "
                      f"{format_bytes(m.total_bytes)} of {format_bytes(m.usable_bytes)} usable")
    else:
        console.print(f"estimated step {format_seconds(best.step_time_s)}: compute {format_seconds(best.compute_s)}, "
                      f"tensor-parallel waits {format_seconds(best.tp_exposed_s)}, bubble "
                      f"{format_seconds(best.bubble_s)}, transfers {format_seconds(best.p2p_s)}, data-parallel "
                      f"exposed {format_seconds(best.dp_exposed_s)}, optimizer {format_seconds(best.optimizer_s)}")
