"""Defects found by the thirteenth fuzz round (fuzz13): ``--rack-placement contiguous`` across layouts, ``dpsim
plan``'s determinism, metamorphic checks of the step (a larger batch, more GPUs, a healthier network) and the
Python API's configs and results.

Each case says what it did before.
"""

from __future__ import annotations

import pytest

from tests.fuzz_harness import check_outcome, run_cli

PLAN_SMALL = ["plan", "--gpus", "64", "--link", "dgx-a100", "--model", "llama-2-7b", "--global-batch", "256",
              "--tp", "2,4,8", "--pp", "1,2", "--micro-batches", "1,2", "--recompute", "off,selective",
              "--tokens", "10B", "--top", "5"]
"""The golden ``small`` search without ``--verify 1``: several layouts simulated, each in a blink."""


# --- (b) dpsim plan prints the same bytes every time ------------------------------------------------------------------
@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_plan_prints_the_same_bytes_however_slow_the_machine(json_out, capsys, monkeypatch):
    """Before: which layouts ``plan`` simulated was cut by wall time (``--verify-seconds``, 2 s by default), so
    the ranking and the chosen layout depended on the machine's load: DeepSeek-V3 on 16,384 GPUs simulated 17
    layouts in one run and 15 in the next, and their --json differed; and the table's title and --json printed
    the search's own run time (``searched in 1.2 s``, ``wall_s``, ``verification.seconds``). Here the clock jumps
    an hour at every reading (a machine that slow stopped after the first layout); the output is unchanged."""
    import dpsim.plan.planner as planner

    # The bound before 2026-12-07's (0.95, 1.06), so that this small search simulates several layouts, stopped by
    # the bound (at 1.06 it stops after the first or second), and a clock cut would have something to cut.
    monkeypatch.setattr(planner, "ESTIMATE_BOUND", (0.94, 1.08))
    args = PLAN_SMALL + (["--json"] if json_out else [])
    first = run_cli(args, capsys)
    check_outcome(first, args, "ok")
    clock = iter(range(0, 10**9, 3600))
    monkeypatch.setattr(planner.time, "perf_counter", lambda: float(next(clock)))
    slow = run_cli(args, capsys)
    assert slow.status == 0 and slow.out == first.out
    if json_out:
        import json

        doc = json.loads(first.out)
        assert doc["verification"]["simulated"] > 1 and doc["verification"]["stopped_by"] == "bound"
        assert "wall_s" not in doc and "seconds" not in doc["verification"]


# --- (d) configs with one meaning compare equal -----------------------------------------------------------------------
def test_an_etp_equal_to_its_default_is_the_config_that_leaves_it_out(capsys):
    """Before: ``PredictConfig(tp=2) != PredictConfig(tp=2, etp=2)`` (the same job: --etp defaults to --tp with
    --ep 1), and on a dense model ``--tp 2 --etp 2`` was refused ("splits the experts") while ``--tp 2 --etp 1``
    was taken, though neither splits anything there. Now an --etp equal to its default is kept as left out, and a
    dense model refuses every other."""
    import dpsim

    assert dpsim.PredictConfig(tp=2) == dpsim.PredictConfig(tp=2, etp=2)
    assert hash(dpsim.PredictConfig(tp=2)) == hash(dpsim.PredictConfig(tp=2, etp=2))
    assert dpsim.PredictConfig(model="mixtral-8x7b", ep=8, etp=1) == dpsim.PredictConfig(model="mixtral-8x7b", ep=8)
    assert dpsim.PredictConfig(tp=2, etp=1) != dpsim.PredictConfig(tp=2)
    base = ["predict", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--steps", "1", "--json"]
    plain = run_cli(base + ["--tp", "2"], capsys)
    same = run_cli(base + ["--tp", "2", "--etp", "2"], capsys)
    check_outcome(same, base, "ok")
    assert same.out == plain.out
    for extra in (["--tp", "2", "--etp", "1"], ["--etp", "2"]):
        check_outcome(run_cli(base + extra, capsys), base + extra, "error", ("--etp:", "gpt2 is dense"))


def test_a_sweep_over_etp_keeps_the_axis_value_its_config_leaves_out():
    """An --etp equal to its default is kept as left out (above); a sweep's etp column still reads the value
    of its point (etp=1,2 under tp=2 read 1 and an empty cell once the config normalised 2 away)."""
    import dpsim

    frame = dpsim.sweep(model="mixtral-8x7b", seq_len=512, micro_batch=1, gpus=16, link="infiniband", tp=2,
                        sequence_parallel=True, etp=[1, 2], steps=1)
    assert list(frame["etp"]) == [1, 2]


# --- (a) --rack-placement and NVL72 racks ------------------------------------------------------------------------------
LLAMA_NVL72 = ["predict", "--model", "llama-2-7b", "--seq-len", "1024", "--micro-batch", "1", "--link", "gb200-nvl72",
               "--steps", "1", "--json"]


def _step(capsys, args: list[str]) -> float:
    import json

    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    return json.loads(outcome.out)["step_time_s"]


def test_a_data_parallel_group_spread_over_two_racks_crosses_the_network():
    """Before: with --tp 8 on gb200-nvl72 (4-GPU trays) the data-parallel group of 144 GPUs (18 ranks, one every
    other tray: 36 trays, two racks) was costed inside one rack's NVLink domain (18 servers for its 18 servers),
    so the default (aligned) step was 0.0597 s and --degrade infiniband:10% left it there to the last digit;
    --rack-placement contiguous, which reads the ranks' trays, said 0.183 s. A rack holds 9 of its ranks
    whatever the placement: both are 0.183 s now, and slowed InfiniBand slows them."""
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.topology.cluster import Topology
    from dpsim.topology.load import load_preset

    job = Topology(spec=load_preset("gb200-nvl72"), n_gpus=144)
    for contiguous in (False, True):
        dp = layout_communicators(job, LayoutShape(tp=8, pp=1, dp=18, experts=False), contiguous)["dp"].topology
        assert (dp.n_nodes, dp.spec.nvlink_domain.nodes) == (18, 9)
    # HSDP's replica group without a layout: one rank of each 2-tray shard group, 9 to a rack as well.
    from dpsim.collectives.groups import communicators

    inter = communicators(job, shard_group=8)["inter"].topology
    assert (inter.n_nodes, inter.spec.nvlink_domain.nodes) == (18, 9)


def test_the_network_under_an_nvl72_tp8_job_matters_whatever_the_placement(capsys):
    """The same defect through the CLI: the aligned step equals the contiguous one (rank order already puts 9
    of each group's 18 ranks in a rack) and a slowed scale-out network slows it (before: unchanged)."""
    args = LLAMA_NVL72 + ["--gpus", "144", "--tp", "8"]
    aligned = _step(capsys, args)
    assert aligned == _step(capsys, args + ["--rack-placement", "contiguous"])
    assert _step(capsys, args + ["--degrade", "infiniband:10%"]) > 2 * aligned


@pytest.mark.parametrize("strategy", ["fsdp-hybrid", "zero3"])
def test_contiguous_is_refused_for_a_shard_group_of_every_rank(strategy, capsys):
    """Before: ``--strategy fsdp-hybrid --zero-group 144`` (or zero3's) on 144 GPUs took --rack-placement
    contiguous and predicted the aligned step to the last digit (one shard group of every rank: no group smaller
    than the job to place), while ``--strategy zero1 --zero-impl internlm --zero-group 144`` refused it."""
    args = LLAMA_NVL72 + ["--gpus", "144", "--strategy", strategy, "--zero-group", "144", "--rack-placement",
                          "contiguous"]
    check_outcome(run_cli(args, capsys), args, "error", ("--rack-placement:", "no group smaller"))
    smaller = LLAMA_NVL72 + ["--gpus", "144", "--strategy", strategy, "--zero-group", "24", "--rack-placement",
                             "contiguous"]
    check_outcome(run_cli(smaller, capsys), smaller, "ok")


@pytest.mark.parametrize("link", ["node0.nic0:10%", "node0.gpu0:10%"])
def test_contiguous_refuses_a_named_link_it_would_put_in_the_wrong_copy(link, capsys):
    """Before: on 100 GB200s (--tp 4 --pp 5) under --rack-placement contiguous, --degrade node0.nic0:10% slowed
    the step 4.6x (0.096 s to 0.440 s): each group is costed as its copy that straddles the racks worst, and the
    slowed NIC was put in that copy, though node0's own copies sit inside rack 0 and cross no NIC (aligned:
    1.06x); node1.nic0 read 1.03x and node2.nic0 5.4x by where the index fell in the worst copy. A link class
    (every copy alike) is still taken."""
    args = LLAMA_NVL72 + ["--gpus", "100", "--tp", "4", "--pp", "5", "--rack-placement", "contiguous"]
    named = args + ["--degrade", link]
    check_outcome(run_cli(named, capsys), named, "error", ("--degrade:", link, "contiguous"))
    healthy = _step(capsys, args)
    assert _step(capsys, args + ["--degrade", "infiniband:10%"]) > healthy


def test_a_plan_called_twice_gives_equal_results_that_pickle():
    """Before: two ``dpsim.plan`` calls of one search were unequal, and so was a result and its pickled copy's
    comparison with a fresh call: each held its own run time (``wall_s``, ``verification["seconds"]``)."""
    import pickle

    import dpsim

    def search():
        return dpsim.plan(dpsim.PredictConfig(model="gpt2", link="infiniband"), gpus=[16], global_batch=64, verify=2,
                          top=3)

    first = search()
    assert first == search() == pickle.loads(pickle.dumps(first))
    assert "seconds" not in first.verification and first.wall_s > 0


def test_contiguous_reads_every_copy_of_a_group_whose_ranks_are_trays_apart():
    """Before: with --tp 16 on 80 GB200s (20 trays) the data-parallel group (5 ranks, one every 4 trays) was
    placed as its copy starting at rank 0 alone (trays 0, 4, ..., 16: all in rack 0), so --rack-placement
    contiguous costed it with 5 ranks per rack, fewer crossings than aligned (4: whole 4-tray tensor-parallel
    groups per rack); the copy 8 ranks on (trays 2, ..., 18) straddles two racks. Both read 4 now."""
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.topology.cluster import Topology
    from dpsim.topology.load import load_preset

    job = Topology(spec=load_preset("gb200-nvl72"), n_gpus=80)
    for contiguous in (False, True):
        dp = layout_communicators(job, LayoutShape(tp=16, pp=1, dp=5, experts=False), contiguous)["dp"].topology
        assert (dp.n_nodes, dp.spec.nvlink_domain.nodes) == (5, 4)
