"""Bad inputs to what was added last (FP8 recipes, DeepSeek recomputation and precision, the MoE all-to-all
overlap, DualPipe, system files, expert parallelism): one line and exit 2, or a sane result.

In-process and quick (the fast lane runs it), judged by ``fuzz_harness.check_outcome`` as the slow
fuzzers are. Each case names the round that found it.
"""

from __future__ import annotations

import pytest

from fuzz_harness import check_outcome, run_cli

PLAN = ["plan", "--model", "llama-3-8b", "--gpus", "8", "--global-batch", "64", "--verify", "0"]
MOE_PLAN = ["plan", "--model", "mixtral-8x7b", "--gpus", "8", "--global-batch", "64", "--verify", "0"]


@pytest.mark.parametrize("args, expect, needles", [
    # fuzz6: the default pair given with --pp 1 was let through (the CLI always passed that pair, so the
    # planner could not tell it from the same pair given) while any other list was refused.
    (PLAN + ["--pp", "1", "--schedules", "1f1b,1f1b-interleaved"], "error",
     ("--schedules: 1f1b,1f1b-interleaved applies only to pipeline-parallel layouts", "--pp 1")),
    (PLAN + ["--pp", "1"], "ok", ()),
    (PLAN + ["--pp", "1", "--schedules", "1f1b"], "ok", ()),
    # fuzz6: --moe-a2a-overlap on a search with no layout it applies to was dropped in silence (exit 0).
    (MOE_PLAN + ["--moe-a2a-overlap", "--ep", "1"], "error",
     ("--moe-a2a-overlap: applies to layouts with --ep 2 or more", "the search has none")),
    (MOE_PLAN + ["--moe-a2a-overlap", "--ep", "4", "--pp", "2", "--schedules", "1f1b"], "error",
     ("--moe-a2a-overlap: ", "1f1b-interleaved, dualpipe")),
    # fuzz6: a layout asked for by --ep alone was refused "with --tp/--cp/--pp", flags the job did not give.
    (["predict", "--model", "mixtral-8x7b", "--gpus", "8", "--link", "nvlink", "--ep", "8", "--strategy", "fsdp",
      "--fsdp-version", "2"], "error", ("--fsdp-version: '2' applies to data parallelism alone; with --ep 8 the fsdp",)),
    (["predict", "--model", "mixtral-8x7b", "--gpus", "8", "--link", "nvlink", "--ep", "8", "--strategy", "zero3"],
     "error", ("--ep: 8 does not combine with --strategy zero3",)),
    (["predict", "--model", "mixtral-8x7b", "--gpus", "8", "--link", "nvlink", "--ep", "8",
      "--activation-checkpointing"], "error", ("--activation-checkpointing: with --ep 8 use --recompute full",)),
    (["predict", "--model", "llama-3-8b", "--gpus", "8", "--link", "nvlink", "--tp", "2", "--pp", "2", "--jobs", "2"],
     "error", ("--jobs: 2 is not modelled with --tp 2 --pp 2; leave it at 1",)),
    # fuzz6: --topology '' predicted on the --link preset in silence; --calibration '' said "cannot read '.'".
    (["predict", "--model", "gpt2", "--gpus", "8", "--topology", ""], "error",
     ("--topology: '' is not valid; expected the path of a topology YAML file",)),
    (PLAN + ["--topology", " "], "error", ("--topology: ' ' is not valid",)),
    (["predict", "--model", "gpt2", "--gpus", "8", "--calibration", ""], "error",
     ("--calibration: '' is not valid; expected the path of a profile JSON file",)),
    # fuzz6: a --schedules dualpipe that found no layout was blamed with the sizes' rules only.
    (["plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "64", "--verify", "0", "--schedules", "dualpipe",
      "--pp", "2", "--tp", "1", "--micro-batches", "16"], "error",
     ("--schedules dualpipe leaves no layout", "dualpipe needs an even --pp and an even number of micro-batches "
                                                "per replica, at least 2 x --pp")),
    # fuzz6: a --recompute mode that applies to no layout searched was blamed with the sizes' rules only.
    (["plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "64", "--verify", "0", "--recompute", "moe"],
     "error", ("--recompute: moe leaves no layout", "moe recomputes a mixture of experts' layers, and gpt2 is dense")),
    (["plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "64", "--verify", "0", "--recompute", "megatron",
      "--tp", "1", "--pp", "1"], "error",
     ("op, megatron and moe recompute layouts with --tp, --pp, --cp or --ep above 1",)),
])
def test_recent_inputs(args, expect, needles, capsys):
    check_outcome(run_cli(args, capsys), args, expect, needles)


MEGASCALE = "validation/systems/megascale-a100-roce.yaml"


@pytest.mark.parametrize("args", [
    # The warning comes before the search: one tensor, pipeline and micro-batch size keep plan's search
    # (and this case) about a twentieth of the whole one (0.6 s against 11.5 s of CPU alone).
    ["plan", "--model", "llama-3-8b", "--gpus", "16", "--global-batch", "64", "--verify", "0",
     "--tp", "1", "--pp", "1", "--micro-batches", "1"],
    ["goodput", "--model", "llama-3-8b", "--gpus", "16"],
    ["sweep", "--model", "llama-3-8b", "--gpus", "16,32"],
])
def test_gpu_of_another_generation_than_the_topology_is_warned_of(args, capsys, monkeypatch):
    """fuzz6: predict warns that --gpu h100 on an A100 system file keeps the A100's links; plan, goodput
    and sweep cost their steps on the same links and said nothing."""
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    outcome = run_cli(args + ["--topology", MEGASCALE, "--gpu", "h100"], capsys)
    check_outcome(outcome, args, "ok")
    text = " ".join(outcome.out.split())
    assert text.count(f"warning: --gpu h100: topology file {MEGASCALE} is built for a100") == 1
    # Its own GPU: silent.
    outcome = run_cli(args + ["--topology", MEGASCALE], capsys)
    assert "warning" not in outcome.out


def test_a_verdict_against_usable_memory_names_it(capsys):
    """fuzz6: predict printed "total 78.0 GiB of 79.6 GiB: DOES NOT FIT" (the verdict is against the 75.7 GiB
    usable after the allocator's headroom), which read as a contradiction."""
    args = ["predict", "--model", "llama-2-7b", "--gpus", "8", "--link", "nvlink", "--micro-batch", "17",
            "--strategy", "fsdp", "--activation-checkpointing"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    text = " ".join(outcome.out.replace("│", " ").split())  # the table's cell, unwrapped
    assert "78.0 GiB of 75.7 GiB usable (79.6 GiB on the GPU): DOES NOT FIT" in text


def test_dualpipe_counts_its_two_chunks_against_the_pipeline_slot_limit():
    """fuzz6: DualPipe plays each stage's two chunks, 1.8x 1F1B's CPU time per micro-batch, so --pp 2 at
    131,072 micro-batches (262,144 slots as counted) took ~48 s on the test machine, twice the limit's bound."""
    from dpsim.errors import ConfigError
    from dpsim.predict.config import PredictConfig

    from dpsim.predict.extrapolate import full_simulation
    from dpsim.predict.run import full_path_allowed, refuse_past_full_path

    kw = dict(model="gpt2", gpus=16, link="infiniband", pp=2, global_batch=1048576, micro_batch=1)
    # Since the steady state is extrapolated (dpsim/predict/extrapolate.py) the config is taken; where every
    # micro-batch is simulated (--timeline, per-rank variability) the slot count still bounds it.
    dual = PredictConfig(**kw, schedule="dualpipe")
    assert not full_path_allowed(dual)
    with pytest.raises(ConfigError, match=r"^micro-batches per replica: 131,072 gives 524,288 pipeline slots"):
        refuse_past_full_path(dual, "--timeline draws every event of the step")
    assert full_path_allowed(PredictConfig(**kw, schedule="1f1b"))  # 262,144 slots: within the limit
    with full_simulation(), pytest.raises(ConfigError, match=r"^--pp x --virtual-stages x micro-batches: 2 x 2 "
                                                             r"\(dualpipe's chunks\) x 131,072 = 524,288 pipeline"):
        PredictConfig(**kw, schedule="dualpipe")
