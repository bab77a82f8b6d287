"""``--degrade`` in ``dpsim plan`` and ``dpsim sweep``: links below capacity, as ``predict --degrade`` takes and
checks them (:mod:`dpsim.network.degrade`), applied to every candidate (closed form and simulation alike) and to
every sweep row."""

from __future__ import annotations

import json

import pytest

from dpsim.cli import main
from dpsim.errors import ConfigError
from dpsim.network.degrade import parse_degradation
from dpsim.plan.grid import SweepSpec
from dpsim.plan.planner import ESTIMATE_BOUND, Planner, plan_layouts
from dpsim.plan.sweep import sweep_records
from dpsim.predict.config import PredictConfig
from dpsim.predict.resolve import resolve
from dpsim.predict.run import predict

HALF_IB = (parse_degradation("infiniband:50%"),)


def _base(model: str = "llama-2-7b", **kw) -> PredictConfig:
    return PredictConfig(model=model, link="infiniband", precision="bf16-params", **kw)


def test_plan_costs_every_layout_on_the_degraded_links_as_predict_does():
    search = dict(gpus=[64], global_batch=256, tps=[2], pps=[2], micro_batches=[1], recomputes=["full"],
                  schedules=["1f1b"], sequence_parallel=True, strategies=["zero1"], top=5, verify=1)
    healthy = plan_layouts(_base(), **search)
    slow = plan_layouts(_base(), **search, degradations=HALF_IB)
    assert slow.degradations == HALF_IB
    (h,), (s,) = healthy.ranked, slow.ranked
    # The data-parallel all-reduce crosses the halved NICs: a slower step, the same memory.
    assert s.step_time_s > h.step_time_s and s.memory_bytes == h.memory_bytes
    # The simulated step is predict --degrade's for the same command.
    base = resolve(_base(micro_batch=1)).config
    assert s.verified is not None
    assert s.step_time_s == pytest.approx(predict(s.candidate.config(base), degradations=HALF_IB).step_time_s,
                                          rel=1e-12)
    command = slow.to_dict()["command"]
    assert "--degrade infiniband:50%" in command and "--degrade" not in healthy.to_dict()["command"]


@pytest.mark.parametrize("model, layout", [
    ("llama-2-7b", dict(tps=[2], pps=[2], strategies=["zero1"])),
    ("llama-2-7b", dict(tps=[1], pps=[1], strategies=["zero3"])),  # a MiCS shard group across nodes too
    ("mixtral-8x7b", dict(tps=[1], pps=[1], eps=[8], strategies=["zero1"])),  # the all-to-all's class factor
])
def test_plan_estimates_stay_within_their_bound_with_degraded_links(model, layout):
    base = resolve(_base(model, micro_batch=1)).config
    # One NIC at half the class's half: the named link paces its copy of each group. (Far slower, where
    # zero3's collectives alone take as long as the compute, its closed form reads up to 1.063x high, with or
    # without --degrade: its one-stream sum against the engine's overlap.)
    planner = Planner(base, degradations=HALF_IB + (parse_degradation("node1.nic0:50%"),))
    cands, _ = planner.candidates(64, global_batch=128, micro_batches=[1], recomputes=["full"],
                                  sequence_parallel=layout["tps"][0] > 1, schedules=["1f1b"], **layout)
    assert cands
    for c in cands[:3]:
        e = planner.estimate(c, global_batch=128)
        if not e.fits:
            continue
        pred = predict(c.config(base), degradations=planner.degradations)
        low = 0.87 if not c.sharded else ESTIMATE_BOUND[0]  # data parallelism alone reads low (test_plan_strategies)
        assert low <= e.step_time_s / pred.step_time_s <= ESTIMATE_BOUND[1], c.flags()


@pytest.mark.parametrize("degradations, needle", [
    ("infiniband:50%", r"^--degrade: 'infiniband:50%' is not valid; expected a tuple of LinkDegradation"),
    ((parse_degradation("infiniband:5%"), parse_degradation("infiniband:1%")),
     r"^--degrade: 'infiniband:1%' leaves 0.05 % of infiniband's capacity"),
    ((parse_degradation("ethernet:50%"),), r"^--degrade: 'ethernet' is not a link of infiniband; .*present here"),
    ((parse_degradation("node5.nic0:50%"),), r"^--degrade: 'node5.nic0:50%' names node 5, .*\(on --gpus 16\)"),
])
def test_plan_refuses_a_bad_degradation_in_one_line(degradations, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        plan_layouts(_base(), gpus=[16, 64], global_batch=256, degradations=degradations)
    assert "\n" not in str(err.value)


def test_plan_degrade_on_the_command_line(capsys):
    argv = ["plan", "--gpus", "64", "--link", "infiniband", "--model", "llama-2-7b", "--global-batch", "256",
            "--tp", "2", "--pp", "2", "--micro-batches", "1", "--recompute", "full", "--schedules", "1f1b",
            "--strategies", "zero1", "--verify", "0", "--degrade", "node1.nic0:25%", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert "--degrade node1.nic0:25%" in d["command"]
    argv[argv.index("node1.nic0:25%")] = "node1.nic0:125%"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--degrade: 'node1.nic0:125%' is not valid" in err


def test_plan_takes_degraded_links_with_a_calibration_profile():
    # A degraded link at a fraction of its calibrated rate (dpsim.profile.calibrated), closed form and simulation.
    degraded = (parse_degradation("nvlink:50%"),)
    base = PredictConfig(model="gpt2", calibration="a100-nvswitch-8gpu")
    search = dict(gpus=[8], global_batch=64, micro_batches=[8], recomputes=["off"], strategies=["ddp"], verify=1)
    healthy, slow = plan_layouts(base, **search), plan_layouts(base, **search, degradations=degraded)
    assert slow.best.step_time_s > healthy.best.step_time_s
    config = slow.best.candidate.config(resolve(PredictConfig(model="gpt2", calibration="a100-nvswitch-8gpu",
                                                              micro_batch=1)).config)
    assert slow.best.step_time_s == predict(config, degradations=degraded).step_time_s
    with pytest.raises(ConfigError, match=r"^--degrade: 'pcie:50%' with --calibration"):
        plan_layouts(PredictConfig(model="gpt2", calibration="aws-p4de-2node"), gpus=[16], global_batch=64,
                     degradations=(parse_degradation("pcie:50%"),))


# ------------------------------------------------------------------------------------------------ sweep

def test_sweep_rows_are_predicts_degraded_steps():
    spec = SweepSpec.from_grid({"gpus": [16, 32], "link": "infiniband", "model": "gpt2", "micro_batch": 4},
                               degrade=["infiniband:50%"])
    rows = sweep_records(spec)
    healthy = sweep_records(SweepSpec.from_grid({"gpus": [16, 32], "link": "infiniband", "model": "gpt2",
                                                 "micro_batch": 4}))
    for row, plain in zip(rows, healthy):
        config = PredictConfig(gpus=row["gpus"], link="infiniband", model="gpt2", micro_batch=4)
        assert row["step_time_s"] == predict(config, degradations=HALF_IB).step_time_s
        assert row["step_time_s"] > plain["step_time_s"]
        assert row["degrade"] == "infiniband:50%" and "degrade" not in plain


def test_sweep_degrade_from_yaml_flag_and_json(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("grid:\n  gpus: [16]\n  link: infiniband\n  model: gpt2\ndegrade: [infiniband:25%]\n")
    assert SweepSpec.from_yaml(grid).degradations == (parse_degradation("infiniband:25%"),)
    # The flag replaces the file's list, and the JSON names what every row was costed with.
    assert main(["sweep", "--config", str(grid), "--degrade", "infiniband:50%", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["degrade"] == ["infiniband:50%"] and d["rows"][0]["degrade"] == "infiniband:50%"
    grid.write_text("grid:\n  gpus: [16]\ndegrade: [infiniband]\n")
    with pytest.raises(ConfigError, match=r"grid.yaml: degrade: 'infiniband' is not valid; expected LINK:PCT%"):
        SweepSpec.from_yaml(grid)
    grid.write_text("grid:\n  gpus: [16]\ndegrade: [3]\n")
    with pytest.raises(ConfigError, match=r"grid.yaml: degrade: 3 is not valid"):
        SweepSpec.from_yaml(grid)


def test_sweep_names_the_point_a_degraded_link_is_missing_from(capsys):
    argv = ["sweep", "--gpus", "16,32", "--link", "infiniband", "--model", "gpt2", "--degrade", "node3.nic0:50%"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sweep point gpus=16: --degrade: 'node3.nic0:50%' names node 3" in err
    # --skip-invalid: that point's error, the other point's degraded row.
    rows = sweep_records(SweepSpec.from_grid({"gpus": [16, 32], "link": "infiniband", "model": "gpt2"},
                                             degrade="node3.nic0:50%"), skip_invalid=True)
    assert rows[0]["error"].startswith("--degrade: ") and rows[1]["error"] is None
    assert rows[0]["degrade"] == rows[1]["degrade"] == "node3.nic0:50%"
