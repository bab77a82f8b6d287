"""The Python API fed what the CLI never passes: wrong types, ``None``, ``nan``, zero and negative sizes.

The CLI parses and checks its flags before it calls the library, so the library's own checks
were only reached by the commands' values. Each case here once ended in a traceback from deep
inside (a ZeroDivisionError, an AssertionError, a TypeError), in a loop that never ended
(``predict_collective(minbytes=0)``), or in a silently wrong answer (``gpu_hour_usd=-1`` left the
cost out). Each must now be one :class:`~dpsim.errors.ConfigError` line naming the flag the CLI
spells it with. All are refused before any simulation runs (milliseconds each).
"""

from __future__ import annotations

import json
import os
import math

import pytest

import dpsim
from dpsim.cli import main
from dpsim.errors import ConfigError
from dpsim.plan.reliability import FailureRates

CONFIG = dict(gpus=8, link="nvlink", model="gpt2", steps=1)


def _refused(call, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        call()
    text = str(exc.value)
    assert text.startswith(needle) and "\n" not in text, text


@pytest.mark.parametrize("kwargs, needle", [
    (dict(minbytes=0), "-b/--minbytes: 0 is not valid"),         # looped forever: 0 x 2 never reaches maxbytes
    (dict(minbytes=math.nan), "-b/--minbytes: nan"),
    (dict(minbytes="1K"), "-b/--minbytes: '1K'"),
    (dict(maxbytes=1e300), "-e/--maxbytes: 1e+300"),
    (dict(minbytes=1e9, maxbytes=1e3), "-b/-e: "),
    (dict(stepfactor=1), "-f/--stepfactor: 1 is not valid"),       # looped forever too
    (dict(stepfactor=1.0000001), "-f/--stepfactor: 1.0000001 from 8"),
    (dict(stepfactor=math.nan), "-f/--stepfactor: nan"),
])
def test_predict_collective_refuses_a_bad_size_sweep(kwargs, needle):
    from dpsim.predict.collective import predict_collective

    _refused(lambda: predict_collective(dpsim.PredictConfig(**CONFIG), **kwargs), needle)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(tokens=math.nan), "--tokens: nan is not valid"),          # int(nan) ValueError
    # Text is the command line's budget (tokens="1T" is taken, as sweep and --tokens take it: round 25); text
    # that is no budget is refused by the command line's own parser.
    (dict(tokens="1T tokens"), "--tokens: '1T tokens' is not a count"),  # TypeError
    (dict(tokens=-1), "--tokens: -1 is not valid"),                 # was blamed on --duration/--tokens
    (dict(tokens=1e300), "--tokens: 1e+300 is not valid"),
    (dict(duration_s="30"), "--duration: '30' has no unit"),      # "30d" is taken, as --duration 30d (round 25)
    (dict(checkpoint_bandwidth_bytes_per_s=None), "--checkpoint-bandwidth: None is not valid"),
    (dict(restart_s=None), "--restart: None is not valid"),
    (dict(replace_s=math.nan), "--replace: nan is not valid"),
    (dict(checkpoint_interval_s="1 hour"), "--checkpoint-interval: '1 hour' is not a duration"),
    (dict(rates=None), "--mtbf-gpu/--mtbf-node/--mtbf-link: None is not valid"),  # AttributeError
])
def test_goodput_refuses_a_value_of_the_wrong_kind(kwargs, needle):
    _refused(lambda: dpsim.goodput(dpsim.PredictConfig(**CONFIG), **kwargs), needle)


def test_goodput_through_the_api_still_runs():
    report = dpsim.goodput(dpsim.PredictConfig(**CONFIG), duration_s=86400.0, runs=3,
                           rates=FailureRates(gpu_mtbf_s=1e6, node_mtbf_s=1e6, link_mtbf_s=math.inf))
    assert report.work_s == 86400.0 and report.n_gpus == 8 and math.isfinite(report.mtbf_s)


@pytest.mark.parametrize("call, needle", [
    (lambda: dpsim.sweep(gpus=[8], link="nvlink", model="gpt2", tokens=1e300), "sweep tokens: 1e+300 is not valid"),
    (lambda: dpsim.sweep(3), "sweep: grid is int"),  # dict(3): a TypeError
])
def test_sweep_refuses_what_the_cli_refuses(call, needle):
    _refused(call, needle)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(stragglers=("gpu0:2x",)), "--straggler: ('gpu0:2x',) is not valid"),  # AttributeError in the run
    (dict(stragglers=3), "--straggler: 3 is not valid"),                          # TypeError: len(3)
    (dict(degradations="nvlink:50%"), "--degrade: 'nvlink:50%' is not valid"),
])
def test_a_variability_spec_refuses_text_where_parsed_objects_belong(kwargs, needle):
    _refused(lambda: dpsim.VariabilitySpec(**kwargs), needle)


@pytest.mark.parametrize("sample_steps", [-1, 0, 2.5, "x", True])
def test_simulate_mix_refuses_a_bad_sample_window(sample_steps):
    from pathlib import Path

    from dpsim.mix import mix_from_dict, simulate_mix

    topology = Path(__file__).parent / "data" / "mix" / "fat-tree-2to1.yaml"
    spec = mix_from_dict({"cluster": {"topology": str(topology), "gpus": 16},
                          "jobs": [{"name": "a", "model": "gpt2", "gpus": 4, "steps": 5}]})
    _refused(lambda: simulate_mix(spec, sample_steps=sample_steps), "--sample-steps: ")


@pytest.mark.parametrize("config", [None, "gpt2", {"gpus": 8}, 8])
@pytest.mark.parametrize("call", [
    lambda c: dpsim.predict(c),
    lambda c: dpsim.memory_report(c),
    lambda c: dpsim.goodput(c, duration_s=86400.0),
    lambda c: dpsim.plan(c, gpus=[8], global_batch=64),
    lambda c: dpsim.predict_collective(c),
], ids=["predict", "memory_report", "goodput", "plan", "predict_collective"])
def test_every_entry_refuses_a_config_that_is_not_a_predict_config(call, config):
    # Each was an AttributeError ('str' object has no attribute 'calibration').
    _refused(lambda: call(config), "config: ")


@pytest.mark.parametrize("kwargs, needle", [
    (dict(tp_comm_overlap="x"), "--tp-comm-overlap: 'x' is not known"),        # Layout's AssertionError
    (dict(tp_comm_overlap=["backward"]), "--tp-comm-overlap: ['backward']"),   # unhashable: a TypeError
    (dict(sequence_parallel=[True]), "--sequence-parallel"),                   # unhashable: a TypeError
    (dict(tp_across_network="no"), "--tp-across-network: 'no' is not valid"),  # was taken as true
    (dict(cp_balance="no"), "--cp-balance"),
    (dict(moe_a2a_overlap=1), "--moe-a2a-overlap"),
    (dict(cp_comm="ring"), "--cp-comm: 'ring' is not known"),                  # was ignored (no cp searched)
    (dict(grad_accum_fusion=None), "--grad-accum-fusion"),
])
def test_plan_checks_the_job_flags_it_is_given(kwargs, needle):
    base = dpsim.PredictConfig(model="gpt2", link="nvlink")
    _refused(lambda: dpsim.plan(base, gpus=[8], global_batch=64, verify=0, **kwargs), needle)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(client="tcp://localhost:8786"), "client: 'tcp://localhost:8786' is not valid"),  # AttributeError
    (dict(workers=10**9), "--workers: 1000000000 is not valid"),   # would start that many processes
    (dict(progress="no"), "--progress: 'no' is not valid"),         # was taken as true
    (dict(skip_invalid="no"), "--skip-invalid: 'no' is not valid"),
])
def test_sweep_checks_how_it_is_run(kwargs, needle):
    _refused(lambda: dpsim.sweep(gpus=[8], link="nvlink", model="gpt2", steps=1, **kwargs), needle)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(dtype=["float"]), "-d/--datatype: ['float'] is not known"),  # unhashable: a TypeError
    (dict(op=["all_reduce"]), "--op: ['all_reduce'] is not a collective"),
])
def test_predict_collective_refuses_a_list_where_a_name_belongs(kwargs, needle):
    from dpsim.predict.collective import predict_collective

    _refused(lambda: predict_collective(dpsim.PredictConfig(**CONFIG), **kwargs), needle)


def test_goodput_without_failures_prints_no_infinite_numbers(capsys):
    # Every MTBF infinite: the job MTBF and Young's and Daly's intervals printed "inf d" and "+inf %".
    from dpsim.cli import main

    status = main(["goodput", "--gpus", "8", "--model", "gpt2", "--duration", "1d", "--runs", "2",
                   "--mtbf-node", "none"])
    out = capsys.readouterr().out
    assert status == 0 and "unbounded (no failures)" in out
    assert "inf" not in out.replace("infiniband", ""), out


@pytest.mark.parametrize("kwargs, needle", [
    # Dropped in silence: the step time was the same as without them.
    (dict(strategy="ddp", fsdp_unit="layer"), "--fsdp-unit: 'layer' is the unit zero3, fsdp"),
    (dict(strategy="zero2", fsdp_unit="model"), "--fsdp-unit: 'model'"),
    (dict(overlap=False, overlap_slowdown=0.5), "--overlap-slowdown: 0.5 slows compute"),
    (dict(strategy="zero1", overlap=False, overlap_slowdown=0.0), "--overlap-slowdown: 0 slows"),
])
def test_a_setting_the_rest_of_the_config_ignores_is_refused(kwargs, needle):
    _refused(lambda: dpsim.PredictConfig(**{**CONFIG, **kwargs}), needle)


@pytest.mark.parametrize("kwargs", [
    dict(strategy="ddp", activation_checkpointing=True, fsdp_unit="layer"),  # the checkpoint unit
    dict(strategy="fsdp", fsdp_unit="layer"),
    dict(strategy="fsdp", tp=2, overlap=False, overlap_slowdown=0.5),        # a layout still overlaps tp traffic
    dict(overlap=False),                                                     # the default slowdown stands unused
])
def test_the_same_settings_where_they_apply_are_accepted(kwargs):
    dpsim.PredictConfig(**{**CONFIG, **kwargs})


def test_sweep_refuses_a_grid_past_the_point_limit_from_python_too():
    # Only the command line counted the points: 1,000 x 1,000 ran on for minutes.
    _refused(lambda: dpsim.sweep(gpus=list(range(1, 1001)), micro_batch=list(range(1, 1001)), model="gpt2"),
             "sweep: 1000 gpus x 1000 micro_batch = 1,000,000 points")


@pytest.mark.parametrize("name, args", [
    ("out.json", ["calibrate", "--from-nccl-tests",
                  "calibration/reference/nccl-tests/8x-a100-sxm-node-nvlink3-via-nvswitch.all_reduce_perf.log",
                  "--force", "--out"]),
    ("out.html", ["report", "--gpus", "8", "--model", "gpt2", "--steps", "1", "-o"]),
    ("out.csv", ["sweep", "--gpus", "8", "--model", "gpt2", "--steps", "1", "-o"]),
])
def test_an_output_path_that_is_a_fifo_or_device_is_never_replaced(tmp_path, capsys, monkeypatch, name, args):
    # The atomic write renames its temporary file over the path: calibrate --out /dev/zero --force,
    # run as root, replaced the machine's /dev/zero with a JSON profile. A FIFO stands in for the device.
    import os
    import stat
    from pathlib import Path

    from dpsim.cli import main

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    target = tmp_path / name
    os.mkfifo(target)
    status = main([*args, str(target)])
    err = capsys.readouterr().err
    assert status == 2 and "is a device, FIFO or socket" in err and err.count("\n") == 1, err
    assert stat.S_ISFIFO(os.stat(target).st_mode)


def test_save_profile_never_replaces_a_fifo(tmp_path):
    import os
    import stat

    from dpsim.errors import ProfileError
    from dpsim.profile.io import load_profile, save_profile, shipped_profiles_dir

    target = tmp_path / "p.json"
    os.mkfifo(target)
    with pytest.raises(ProfileError, match="is a device, FIFO or socket"):
        save_profile(load_profile(shipped_profiles_dir() / "a100-nvswitch-8gpu.json"), target)
    assert stat.S_ISFIFO(os.stat(target).st_mode)


def test_an_output_under_a_file_says_the_directory_is_a_file(tmp_path):
    # fuzz3: out.yaml/t.html read "directory 'out.yaml' does not exist" though the file is right there.
    from dpsim.errors import ConfigError
    from dpsim.files import check_output_path

    (tmp_path / "out.yaml").write_text("x")
    with pytest.raises(ConfigError, match=r"--html: directory '.*out\.yaml' is not a directory$"):
        check_output_path(tmp_path / "out.yaml" / "t.html", "--html")
    with pytest.raises(ConfigError, match=r"does not exist$"):
        check_output_path(tmp_path / "missing" / "t.html", "--html")


def test_a_numeric_choice_given_as_a_number(tmp_path, capsys):
    # fsdp_version's choices are the text '1' and '2'. A sweep file's ``fsdp_version: [2]`` (YAML
    # reads 2 as a number) was refused with "2 is not valid; expected one of 1, 2"; from Python the
    # number stays refused, but says what to give.
    _refused(lambda: dpsim.PredictConfig(**{**CONFIG, "strategy": "fsdp", "fsdp_version": 2}),
             "--fsdp-version: 2 is a number, but its choices are text: give '2'")
    spec = tmp_path / "sweep.yaml"
    spec.write_text("grid: {gpus: [8], link: [nvlink], model: [gpt2], strategy: [fsdp], fsdp_version: [1, 2]}\n")
    assert main(["sweep", "--config", str(spec), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert sorted(r["fsdp_version"] for r in rows) == ["1", "2"]


def test_every_row_of_a_sweep_names_its_axis_values(capsys):
    # A field --json leaves out at its default (compile, cp, fsdp_version...) was missing from the rows
    # at that value: a sweep over compile=false,true printed compile empty (None) for the false rows.
    assert main(["sweep", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "--axis", "compile=false,true",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["compile"] for r in rows] == [False, True]


def test_an_output_written_over_a_private_file_stays_private(tmp_path, capsys):
    # The atomic write gave its temporary file the umask's bits: a 0600 results file came back 0644.
    out = tmp_path / "r.csv"
    out.write_text("old\n")
    out.chmod(0o600)
    assert main(["sweep", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "-o", str(out)]) == 0
    assert (out.stat().st_mode & 0o777) == 0o600 and out.read_text() != "old\n"
    fresh = tmp_path / "new.csv"
    assert main(["sweep", "--gpus", "8", "--link", "nvlink", "--model", "gpt2", "-o", str(fresh)]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert (fresh.stat().st_mode & 0o777) == 0o666 & ~umask
