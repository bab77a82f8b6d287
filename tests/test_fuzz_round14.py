"""Defects found by the fourteenth fuzz round (fuzz14): configs with one meaning that compared unequal, ``dpsim
plan`` and ``predict`` disagreeing over ``--etp`` on a dense model, ``--degrade`` under ``--rack-placement
contiguous`` on the all-to-alls, ``dpsim memory``'s flags, and hostile inputs through every command.

Each case says what it did before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fuzz_harness import check_outcome, run_cli

REPO = Path(__file__).resolve().parent.parent


# --- 1. a --zero-group of every data-parallel rank is the config that leaves it out ---------------------------------
@pytest.mark.parametrize("settings, group", [
    (dict(strategy="zero3"), 16),
    (dict(strategy="zero1", zero_impl="internlm"), 16),
    (dict(strategy="zero1", zero_impl="internlm", tp=2), 8),
], ids=["zero3", "internlm", "internlm-tp2"])
def test_a_zero_group_of_every_rank_is_the_config_that_leaves_it_out(settings, group):
    """Before: ``PredictConfig(strategy="zero3", gpus=16, zero_group=16) != PredictConfig(strategy="zero3",
    gpus=16)`` (and they hashed apart), though both shard over every rank and predicted the same step to the last
    digit; so did InternLM's ZeRO-1 group (its default is every data-parallel rank too, 8 under --tp 2)."""
    import dpsim

    base = dict(model="gpt2", gpus=16, link="infiniband", steps=1, **settings)
    left_out, given = dpsim.PredictConfig(**base), dpsim.PredictConfig(**base, zero_group=group)
    assert given == left_out and hash(given) == hash(left_out)
    assert given.parallelism.zero_group is None
    # A smaller group is a different job, kept.
    assert dpsim.PredictConfig(**base, zero_group=group // 2).parallelism.zero_group == group // 2


def test_a_zero_group_of_every_rank_prints_what_leaving_it_out_prints(capsys):
    """The same through the CLI: --json's config named ``zero_group: 16`` for one of two identical jobs."""
    base = ["predict", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--steps", "1", "--strategy", "zero3",
            "--json"]
    plain = run_cli(base, capsys)
    given = run_cli(base + ["--zero-group", "16"], capsys)
    check_outcome(given, base, "ok")
    assert given.out == plain.out


def test_fsdp_hybrids_zero_group_is_kept_as_given():
    """fsdp-hybrid's default group is one node, which a config does not know: its group stays as given."""
    import dpsim

    config = dpsim.PredictConfig(model="gpt2", gpus=16, link="infiniband", strategy="fsdp-hybrid", zero_group=16)
    assert config.parallelism.zero_group == 16


# --- 2. plan --etp on a dense model takes what predict takes ------------------------------------------------------------
PLAN_DENSE = ["plan", "--gpus", "64", "--link", "dgx-a100", "--model", "llama-2-7b", "--global-batch", "256",
              "--micro-batches", "1", "--recompute", "selective", "--top", "3", "--json"]


@pytest.mark.parametrize("extra", [["--tp", "2,4", "--etp", "1"], ["--tp", "2,4", "--etp", "1,2"], ["--etp", "1"],
                                   ["--tp", "2", "--etp", "4"]],
                         ids=["etp1-under-tp2,4", "etp1,2", "etp1-without-tp", "etp4-under-tp2"])
def test_plan_refuses_an_etp_predict_refuses_on_a_dense_model(extra, capsys):
    """Before: ``plan --tp 2,4 --etp 1`` on llama-2-7b searched tp 2 and 4 (``predict --tp 2 --etp 1`` refuses: "gpt2
    is dense"), while ``--etp 2,4`` under ``--tp 2,4`` (each predict's default) was refused "splits the experts"."""
    args = PLAN_DENSE + extra
    check_outcome(run_cli(args, capsys), args, "error", ("--etp:", "llama-2-7b is dense", "equal to --tp"))


def test_plan_takes_an_etp_equal_to_tp_on_a_dense_model_as_left_out(capsys):
    """``--etp`` equal to ``--tp`` is predict's default on a dense model: the search is the one without it."""
    plain = run_cli(PLAN_DENSE + ["--tp", "2,4"], capsys)
    check_outcome(plain, PLAN_DENSE, "ok")
    same = run_cli(PLAN_DENSE + ["--tp", "2,4", "--etp", "4,2"], capsys)
    check_outcome(same, PLAN_DENSE, "ok")
    assert same.out == plain.out
    # predict agrees: the default taken, any other refused.
    predict = ["predict", "--model", "llama-2-7b", "--gpus", "64", "--link", "dgx-a100", "--steps", "1"]
    check_outcome(run_cli(predict + ["--tp", "2", "--etp", "2"], capsys), predict, "ok")
    check_outcome(run_cli(predict + ["--tp", "2", "--etp", "1"], capsys), predict, "error", ("--etp:", "dense"))


# --- 3. --degrade under --rack-placement contiguous reaches every copy's all-to-all ---------------------------------------
def _racks_of_three(tmp_path) -> str:
    """gb200-nvl72 with 3-tray racks: 16 GPUs are 4 trays, 3 in rack 0 and 1 in rack 1."""
    import yaml

    doc = yaml.safe_load((REPO / "topologies" / "gb200-nvl72.yaml").read_text())
    doc["name"] = "gb200-nvl12"
    doc["nvlink_domain"]["nodes"] = 3
    path = tmp_path / "nvl12.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_a_slowed_rack_nvlink_slows_the_all_to_all_of_the_copy_inside_the_rack(tmp_path, capsys):
    """Before: mixtral-8x7b on 16 GPUs in racks of 3 trays, --ep 8 (two trays a group), --rack-placement contiguous:
    the all-to-all's degraded link classes were read from the worst-placed copy alone (trays 2 and 3, split over
    the racks: no rack NVLink in it), so --degrade nvlink-domain:1% left the copy inside rack 0 (trays 0 and 1,
    over the rack's NVLink) at its healthy all-to-all: ep_comm_s 0.0256 s degraded or not, where aligned placement
    read 0.154 s. It reads every copy now, as the other collectives do."""
    topo = _racks_of_three(tmp_path)
    args = ["predict", "--model", "mixtral-8x7b", "--topology", topo, "--gpus", "16", "--ep", "8", "--seq-len",
            "1024", "--micro-batch", "1", "--steps", "1", "--json"]

    def ep_comm(extra):
        outcome = run_cli(args + extra, capsys)
        check_outcome(outcome, args + extra, "ok")
        return json.loads(outcome.out)["layout"]["ep_comm_s"]

    healthy = ep_comm(["--rack-placement", "contiguous"])
    aligned = ep_comm(["--degrade", "nvlink-domain:1%"])
    degraded = ep_comm(["--degrade", "nvlink-domain:1%", "--rack-placement", "contiguous"])
    assert degraded >= aligned > 2 * healthy


def test_degraded_classes_read_every_copy(tmp_path):
    """The factors themselves: the lowest each class is left in any copy (a copy without the class is untouched)."""
    from dpsim.collectives.groups import LayoutShape
    from dpsim.network.degrade import parse_degradation
    from dpsim.predict import PredictConfig
    from dpsim.predict.layout import degraded_classes
    from dpsim.predict.run import build_collectives, resolve_topology

    config = PredictConfig(model="mixtral-8x7b", topology_file=_racks_of_three(tmp_path), gpus=16, ep=8,
                           rack_placement="contiguous")
    topo = resolve_topology(config)
    collectives = build_collectives(config, topo, degradations=(parse_degradation("nvlink-domain:1%"),),
                                    layout=LayoutShape(tp=1, pp=1, dp=16, ep=8, experts=True))
    assert collectives.communicator("ep").copies  # the copies sit differently on the racks
    assert degraded_classes(collectives, "ep") == {"nvlink-domain": 0.01}


# --- 4. memory takes predict's command line, and refuses what predict refuses --------------------------------------------
CALIBRATED = ["--model", "gpt2", "--gpus", "8", "--link", "dgx-a100", "--calibration",
              "calibration/profiles/a100-nvswitch-8gpu.json"]


@pytest.mark.parametrize("extra, flag", [(["--algo", "ring"], "--algo"), (["--proto", "LL"], "--proto"),
                                         (["--jobs", "2"], "--jobs")])
def test_memory_refuses_a_collective_flag_beside_a_profile_as_predict_does(extra, flag, capsys):
    """Before: ``dpsim memory ... --calibration PROFILE --algo ring`` (or --proto, --jobs 2) printed the table, while
    predict refused the same line ("not available with --calibration"). Without a profile both take them (memory
    takes predict's command line as it is, and says so in --help)."""
    base = [a if not a.startswith("calibration/") else str(REPO / a) for a in CALIBRATED]
    for command in (["memory"], ["predict", "--steps", "1"]):
        args = command + base + extra
        check_outcome(run_cli(args, capsys), args, "error", (f"{flag}:", "not available with --calibration"))
    plain = ["memory", "--model", "gpt2", "--gpus", "8", "--link", "dgx-a100"]
    alone = run_cli(plain + ["--json"], capsys)
    with_flags = run_cli(plain + ["--json", "--algo", "ring", "--jobs", "2"], capsys)
    check_outcome(with_flags, plain, "ok")
    assert with_flags.out == alone.out


def test_memory_help_says_which_flags_it_ignores(capsys):
    outcome = run_cli(["memory", "--help"], capsys)
    assert outcome.status == 0 and "are ignored" in outcome.out


# --- numpy's numbers through the Python API ----------------------------------------------------------------------------
def test_a_config_takes_numpys_numbers_as_pythons():
    """Before: ``PredictConfig(gpus=np.int64(16))`` (a value from ``np.arange`` or a DataFrame's column) was refused
    "--gpus: np.int64(16) is not valid; expected an integer", and so was ``compute_efficiency=np.float32(0.5)``; now
    each is kept as Python's own number (the config equal to the one given ints, --json's numbers plain). A float
    that is a whole number is still refused for an integer (16.0 GPUs), and a bool for a number."""
    np = pytest.importorskip("numpy")
    import dpsim

    config = dpsim.PredictConfig(model="gpt2", link="infiniband", gpus=np.int64(16), global_batch=np.int32(64),
                                 compute_efficiency=np.float32(0.5), strategy="zero3", zero_group=np.int64(8))
    assert config == dpsim.PredictConfig(model="gpt2", link="infiniband", gpus=16, global_batch=64,
                                         compute_efficiency=0.5, strategy="zero3", zero_group=8)
    assert type(config.cluster.gpus) is int and type(config.value_of("compute_efficiency")) is float
    for bad in (dict(gpus=np.float64(16.0)), dict(gpus=np.bool_(True)), dict(compute_efficiency=np.bool_(True))):
        with pytest.raises(dpsim.DpsimError, match="is not valid"):
            dpsim.PredictConfig(**bad)


def test_a_sweep_takes_a_range_or_an_array_as_an_axis():
    """Before: ``dpsim.sweep(gpus=range(8, 17, 8))`` and ``gpus=np.arange(8, 17, 8)`` were refused "range(8, 17, 8)
    is not valid; expected an integer" (only a list or tuple was a list of values), and a list of numpy integers
    "np.int64(8) is not valid"."""
    np = pytest.importorskip("numpy")
    import dpsim

    for gpus in (range(8, 17, 8), np.arange(8, 17, 8), [np.int64(8), np.int64(16)]):
        frame = dpsim.sweep(model="gpt2", link="infiniband", steps=1, micro_batch=np.int64(2), gpus=gpus)
        assert list(frame["gpus"]) == [8, 16] and list(frame["micro_batch"]) == [2, 2]


# --- plan and predict agree on a named --degrade link under --rack-placement contiguous ----------------------------------
def test_plan_refuses_a_named_link_under_contiguous_as_predict_does(capsys):
    """Before: ``plan --gpus 144 --link gb200-nvl72 --rack-placement contiguous --degrade node0.nic0:50%`` ranked its
    layouts (each costed with the slowed NIC in its worst-straddling copy, the error predict refuses it for) and
    printed a best command, ``dpsim predict ... --rack-placement contiguous --degrade node0.nic0:50% ...``, that
    predict refused."""
    args = ["plan", "--link", "gb200-nvl72", "--model", "llama-2-7b", "--global-batch", "288", "--seq-len", "1024",
            "--gpus", "144", "--top", "2", "--rack-placement", "contiguous", "--degrade", "node0.nic0:50%"]
    check_outcome(run_cli(args, capsys), args, "error", ("--degrade:", "node0.nic0:50%", "contiguous"))
    predict = ["predict", "--model", "llama-2-7b", "--link", "gb200-nvl72", "--seq-len", "1024", "--gpus", "144",
               "--tp", "2", "--micro-batch", "1", "--steps", "1", "--rack-placement", "contiguous", "--degrade",
               "node0.nic0:50%"]
    check_outcome(run_cli(predict, capsys), predict, "error", ("--degrade:", "node0.nic0:50%", "contiguous"))


# --- mix: one failure given twice ------------------------------------------------------------------------------------
def test_mix_refuses_a_failure_event_given_twice(tmp_path, capsys):
    """Before: two identical ``failures.events`` entries (a copied line) ran, and the mix reported two failures of
    server 0 at 300 s, the second of a server already down and charged to no job. Two events of one server at
    different times, or of two servers at one time, are still taken."""
    head = ("cluster: {link: infiniband, gpus: 32}\nhorizon: 2h\njobs:\n  - {name: a, model: gpt2, gpus: 16}\n"
            "failures:\n  repair: 1h\n  events:\n")
    twice = tmp_path / "twice.yaml"
    twice.write_text(head + "    - {at: 5min, node: 0}\n    - {at: 5min, node: 0, repair: 30min}\n")
    args = ["mix", str(twice), "--json"]
    check_outcome(run_cli(args, capsys), args, "error", ("failures.events[1]:", "repeats failures.events[0]"))
    apart = tmp_path / "apart.yaml"
    apart.write_text(head + "    - {at: 5min, node: 0}\n    - {at: 5min, node: 1}\n    - {at: 90min, node: 0}\n")
    args = ["mix", str(apart), "--json"]
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "ok")
    assert len(json.loads(outcome.out)["failures"]) == 3


# --- an error line never carries a terminal's format or control characters ----------------------------------------------
@pytest.mark.parametrize("args", [["predict", "--x\u202ey"], ["predict", "a\u202eb"], ["models", "\u2066x\u2069"],
                                  ["predict", "--model", "gpt2", "--degrade", "infini\u202eband:50%"]],
                         ids=["option", "argument", "isolate", "degrade"])
def test_an_error_line_escapes_a_right_to_left_override(args, capsys):
    """Before: ``dpsim predict --x<U+202E>y`` printed "No such option: --x<U+202E>y" with the override itself, which
    a terminal obeys (the rest of the line shown right to left); an escape character was already escaped, a format
    character (Unicode category Cf) was not. Now each is written as its \\u escape; printable text (é, ジ) stays."""
    outcome = run_cli(args, capsys)
    check_outcome(outcome, args, "error")
    assert all(ch.isprintable() for ch in outcome.err.rstrip("\n")), repr(outcome.err)
    assert "\\u" in outcome.err
    accented = ["predict", "--model", "gpt2é"]
    assert "gpt2é" in run_cli(accented, capsys).err


def test_a_plan_takes_numpys_integers_as_its_axes():
    """Before: ``dpsim.plan(config, gpus=np.array([16]), global_batch=np.int64(64))`` was refused "--gpus: array([16])
    is not valid" (and "np.int64(64) is not valid"), where predict and sweep take them now; the search is the one
    given Python ints. A float or a bool is still refused."""
    np = pytest.importorskip("numpy")
    import dpsim

    base = dpsim.PredictConfig(model="gpt2", link="infiniband")
    plain = dpsim.plan(base, gpus=[16], global_batch=64, top=1)
    assert dpsim.plan(base, gpus=np.array([16]), global_batch=np.int64(64), top=1) == plain
    assert dpsim.plan(base, gpus=range(16, 17), global_batch=64, top=1) == plain
    for gpus in ([16.0], [True]):
        with pytest.raises(dpsim.DpsimError, match="^--gpus: .* is not valid"):
            dpsim.plan(base, gpus=gpus, global_batch=64, top=1)


# --- an output through a symbolic link ----------------------------------------------------------------------------------
def test_an_output_through_a_symlink_writes_its_target(tmp_path, capsys):
    """Before: ``dpsim sweep -o latest.csv`` where latest.csv links to runs/1.csv replaced the link with a new file
    and left runs/1.csv as it was (the atomic rename renamed over the link), and a link into a missing directory
    became a file; now the target is written (atomically), as a plain open() would, and the missing directory is
    refused in one line."""
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "1.csv"
    target.write_text("old\n")
    link = tmp_path / "latest.csv"
    link.symlink_to(target)
    args = ["sweep", "--model", "gpt2", "--link", "infiniband", "--gpus", "8", "--steps", "1", "-o", str(link)]
    check_outcome(run_cli(args, capsys), args, "ok")
    assert link.is_symlink()
    assert target.read_text() != "old\n" and "gpus" in target.read_text()
    dangling = tmp_path / "dangling.csv"
    dangling.symlink_to(tmp_path / "missing" / "x.csv")
    args = args[:-1] + [str(dangling)]
    check_outcome(run_cli(args, capsys), args, "error", ("-o/--output",))
    assert dangling.is_symlink()
