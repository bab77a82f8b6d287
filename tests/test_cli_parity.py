"""Commands that describe the same job agree (issue 25 item 2, "one library behind every command").

``goodput`` costs the job ``predict`` predicts: the same flags give the same throughput, MoE flags
included (goodput had no --moe-a2a-overlap, --moe-routing, --moe-a2a, ..., so an MoE job run with the
all-to-all overlap could not be costed at all).
"""

from __future__ import annotations

import json

import pytest

from dpsim.cli import main

MOE_JOB = ["--model", "mixtral-8x7b", "--link", "nvlink", "--gpus", "16", "--ep", "8", "--grad-accum", "4"]


def _json(args: list[str], capsys) -> dict:
    capsys.readouterr()
    status = main(args)
    out, err = capsys.readouterr()
    assert status in (0, None), err
    return json.loads(out)


@pytest.mark.parametrize("moe_flags", [
    ["--moe-a2a-overlap"],
    ["--moe-a2a-overlap", "--moe-a2a", "hierarchical", "--moe-routing", "zipf:0.5", "--moe-capacity-factor", "1.25"],
])
def test_goodput_costs_the_moe_job_predict_predicts(moe_flags, capsys):
    predicted = _json(["predict", *MOE_JOB, *moe_flags, "--json"], capsys)
    costed = _json(["goodput", *MOE_JOB, *moe_flags, "--runs", "2", "--json"], capsys)
    # Same step time: the same tokens per step over the same step (exact, one library computes both).
    assert costed["tokens_per_s"] == predicted["tokens_per_s"]
    # And the flags reach both: without them the job is another one.
    plain = _json(["predict", *MOE_JOB, "--json"], capsys)
    assert plain["tokens_per_s"] != predicted["tokens_per_s"]


def test_goodput_and_predict_share_every_moe_flag():
    from dpsim.cli.goodput import GOODPUT_FIELDS
    from dpsim.cli.predict import PREDICT_FIELDS
    from dpsim.predict.config import MOE_FIELDS

    assert set(MOE_FIELDS) <= set(GOODPUT_FIELDS) & set(PREDICT_FIELDS)


TOPOLOGY = "topologies/examples/fat-tree-3tier.yaml"


@pytest.mark.parametrize("args", [
    ["predict", "--model", "gpt2", "--gpus", "8"],
    ["goodput", "--model", "gpt2", "--gpus", "8", "--runs", "2"],
    ["memory", "--model", "gpt2", "--gpus", "8"],
    ["plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "64", "--verify", "0"],
    ["sweep", "--model", "gpt2", "--gpus", "8"],
    ["collective", "--gpus", "8"],
])
def test_link_with_a_topology_file_is_refused_in_one_line(args, capsys):
    # The file won and the preset was dropped without a word (mix refused the pair already).
    capsys.readouterr()
    assert main([*args, "--link", "nvlink", "--topology", TOPOLOGY]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--link and --topology: 'nvlink' and" in err, err


def test_link_left_out_is_resolved_by_the_library():
    from dpsim.errors import ConfigError
    from dpsim.predict.config import DEFAULT_LINK, PredictConfig

    assert PredictConfig().cluster.link == DEFAULT_LINK == "ethernet"
    assert PredictConfig(topology_file=TOPOLOGY).cluster.link is None  # the file's own links, no preset
    # The Python API refuses the pair as the command line does (one library behind both).
    with pytest.raises(ConfigError, match="--link and --topology"):
        PredictConfig(link="ethernet", topology_file=TOPOLOGY)


def test_collective_link_default_stays_nvlink(capsys):
    out = _json(["collective", "--gpus", "8", "-b", "1M", "-e", "1M", "--json"], capsys)
    assert "nvlink" in json.dumps(out).lower()


def test_plan_on_a_topology_file_echoes_no_preset(capsys):
    # The planner prints the settings that differ from the defaults: link is None here, never "--link None".
    capsys.readouterr()
    assert main(["plan", "--model", "gpt2", "--gpus", "1024", "--global-batch", "1024", "--verify", "0", "--top", "1",
                 "--topology", TOPOLOGY, "--json"]) == 0
    out = capsys.readouterr().out
    assert TOPOLOGY in out and "--link" not in out


CP_JOB = ["--model", "llama-3-8b", "--link", "nvlink", "--gpus", "16", "--tp", "2", "--cp", "2", "--seq-len", "8192",
          "--micro-batch", "1"]
ZERO_JOB = ["--model", "gpt2", "--link", "nvlink", "--gpus", "16", "--strategy", "zero1"]
DDP_JOB = ["--model", "gpt2", "--link", "nvlink", "--gpus", "8"]


@pytest.mark.parametrize("job, flags", [
    # A shipped profile: its fitted collectives, measured compute and overlap slowdown (profile defaults
    # the library resolves for both).
    (DDP_JOB, ["--calibration", "a100-nvswitch-8gpu"]),
    (DDP_JOB, ["--calibration", "a100-nvswitch-8gpu", "--overlap-slowdown", "0.3", "--bucket-cap-mb", "50"]),
    (DDP_JOB, ["--no-overlap", "--algo", "tree", "--comm-hook", "bf16-compress", "--clip-grad-norm"]),
    (DDP_JOB, ["--single-gpu-samples-per-s", "40"]),  # predict's own converted option, shared
    (CP_JOB, ["--cp-comm", "all-gather"]),
    (ZERO_JOB, ["--zero-impl", "internlm", "--zero-group", "4"]),
])
def test_goodput_costs_the_step_predict_predicts(job, flags, capsys):
    """goodput took 42 of predict's 71 fields: with --calibration (or --cp-comm, --zero-impl, ...)
    the flag was refused there, so the same job could not be costed at the step predict gives."""
    predicted = _json(["predict", *job, *flags, "--json"], capsys)
    costed = _json(["goodput", *job, *flags, "--runs", "2", "--json"], capsys)
    # goodput's JSON carries the rates, not the step: the same samples and tokens per step over the
    # same step give exactly the same rates (one library computes both).
    assert costed["samples_per_s"] == predicted["samples_per_s"]
    assert costed["tokens_per_s"] == predicted["tokens_per_s"]
    # And the flags reach both: without them the job costs another step.
    plain = _json(["predict", *job, "--json"], capsys)
    assert plain["samples_per_s"] != predicted["samples_per_s"]


def test_goodput_takes_every_predict_field():
    from dpsim.cli.goodput import GOODPUT_FIELDS
    from dpsim.cli.predict import PREDICT_FIELDS

    assert tuple(GOODPUT_FIELDS) == tuple(PREDICT_FIELDS)


def test_goodput_checkpoint_follows_the_internlm_zero_group(capsys):
    """With --zero-group 4 InternLM's zero1 shards the optimizer state within 4 consecutive ranks and
    replicates it across groups: one group (4 GPUs of one node) writes the whole checkpoint, where
    sharding over all 16 ranks of 2 nodes splits it between the nodes (twice the busiest node's write)."""
    job = [*ZERO_JOB, "--zero-impl", "internlm", "--runs", "2", "--json"]
    every_rank = _json(["goodput", *job], capsys)
    grouped = _json(["goodput", *job, "--zero-group", "4"], capsys)
    assert grouped["checkpoint_bytes"] == every_rank["checkpoint_bytes"]
    assert grouped["checkpoint_write_s"] == pytest.approx(2 * every_rank["checkpoint_write_s"], rel=1e-12)


# ``memory`` reports the breakdown ``predict`` reports for the same job: every flag that sets memory per
# rank reaches both (memory had no --mtp-depth, --ep, --moe-* or --calibration), and a flag that
# cannot change memory (--power-cap-w) is accepted and ignored by both.
MEMORY_JOBS = [
    ["--model", "mixtral-8x7b", "--link", "nvlink", "--gpus", "16", "--ep", "8", "--mtp-depth", "1",
     "--moe-capacity-factor", "1.25", "--moe-routing", "zipf:0.5", "--strategy", "zero1"],
    ["--model", "mixtral-8x7b", "--link", "nvlink", "--gpus", "16", "--ep", "4", "--etp", "2",
     "--moe-a2a", "hierarchical", "--moe-node-limit", "2", "--strategy", "zero1", "--recompute", "full"],
    ["--model", "llama-2-7b", "--link", "nvlink", "--gpus", "8", "--strategy", "fsdp", "--loss-impl", "eager",
     "--seq-len", "4096", "--micro-batch", "2"],
    ["--model", "gpt2", "--link", "nvlink", "--gpus", "8", "--gpu", "a100", "--power-cap-w", "250"],
    ["--model", "gpt2", "--gpus", "8", "--calibration", "a100-nvswitch-8gpu"],
]


@pytest.mark.parametrize("job", MEMORY_JOBS)
def test_memory_reports_predicts_memory_section(job, capsys):
    import dpsim
    from dpsim.predict.config import PredictConfig

    predicted = _json(["predict", *job, "--json"], capsys)["memory"]
    reported = _json(["memory", *job, "--json"], capsys)
    assert {key: reported[key] for key in predicted} == predicted
    # The CLI is the Python API: the same flags as fields give the same report.
    flags = {a.removeprefix("--").replace("-", "_"): b for a, b in zip(job[::2], job[1::2])}
    fields = {key: (float(v) if key in ("moe_capacity_factor", "power_cap_w")
                    else int(v) if v.isdigit() else v) for key, v in flags.items()}
    assert dpsim.memory_report(PredictConfig(**fields)).to_dict() == reported


def test_memory_takes_every_field_predict_takes():
    from dpsim.cli.memory import MEMORY_FIELDS
    from dpsim.cli.predict import PREDICT_FIELDS

    assert set(MEMORY_FIELDS) == set(PREDICT_FIELDS)


def test_the_moe_flags_change_memory(capsys):
    # Without these flags the job is another one: the parity above is not vacuous.
    base = MEMORY_JOBS[0][:6]
    plain = _json(["memory", *base, "--json"], capsys)
    full = _json(["memory", *MEMORY_JOBS[0], "--json"], capsys)
    assert plain["total_bytes"] != full["total_bytes"]


def test_memory_refuses_the_power_cap_predict_refuses(capsys):
    job = ["--model", "gpt2", "--link", "nvlink", "--gpus", "8", "--gpu", "h100", "--power-cap-w", "500"]
    for command in ("predict", "memory"):
        capsys.readouterr()
        assert main([command, *job, "--json"]) == 2
        assert "--power-cap-w: no measured throughput under a power cap for gpu 'h100'" in capsys.readouterr().err
