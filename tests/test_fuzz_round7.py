"""Bad inputs found by the seventh fuzz round (fuzz7): one line and exit 2, or a sane result; the files a
command reads are never replaced by what it writes.

In-process and quick (the fast lane runs it), judged by ``fuzz_harness.check_outcome`` as the other fuzz
suites are. Each case says what it did before.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from fuzz_harness import check_outcome, run_cli

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "calibration" / "profiles" / "a100-nvswitch-8gpu.json"
GOODPUT = ["goodput", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--runs", "2"]
CALIBRATE = ["calibrate", "--backend", "gloo", "--nproc", "2"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- sweep -o over a file the sweep's points read -------------------------------------------------------
@pytest.mark.parametrize("axes, source", [
    # Before: the sweep read the profile, ran, and replaced it with its results table (status 0).
    (["--axis", "calibration={d}/p.json"], "p.json"),
    # Before: the routing histogram was replaced the same way.
    (["--model", "mixtral-8x7b", "--axis", "ep=8", "--axis", "moe_routing=histogram:{d}/h.json"], "h.json"),
    (["--model", "mixtral-8x7b", "--axis", "ep=8", "--axis", "moe_routing=histogram: {d}/h.json"], "h.json"),
])
def test_sweep_output_is_never_an_input(axes, source, tmp_path, capsys):
    shutil.copy(PROFILE, tmp_path / "p.json")
    (tmp_path / "h.json").write_text("[1, 2, 3, 4, 5, 6, 7, 8]\n")
    target = tmp_path / source
    before = _digest(target)
    args = ["sweep", "--model", "gpt2", "--gpus", "8", "--link", "nvlink",
            *[a.format(d=tmp_path) for a in axes], "-o", str(target)]
    check_outcome(run_cli(args, capsys), args, "error",
                  ("-o/--output: ", "is a file the sweep reads", "choose another -o"))
    assert _digest(target) == before


def test_sweep_output_over_a_grid_file_input_is_refused_by_the_library_too(tmp_path):
    """write_results (the API's writer) refuses it as well: the CLI's check runs before the sweep."""
    import pandas as pd

    from dpsim.errors import ConfigError
    from dpsim.plan.grid import SweepSpec
    from dpsim.plan.sweep import write_results

    shutil.copy(PROFILE, tmp_path / "p.json")
    before = _digest(tmp_path / "p.json")
    spec = SweepSpec.from_grid({"calibration": [str(tmp_path / "p.json")]}, origin="grid")
    with pytest.raises(ConfigError, match="is a file the sweep reads"):
        write_results(pd.DataFrame([{"a": 1}]), tmp_path / "p.json", spec)
    assert _digest(tmp_path / "p.json") == before
    write_results(pd.DataFrame([{"a": 1}]), tmp_path / "other.json", spec)  # any other name is written


# --- MTBFs past any run: 300-digit numbers, or an overflow read as "never fails" ---------------------------
@pytest.mark.parametrize("flag, value, needles", [
    # Before: the job's MTBF printed as a 300-digit number of days (status 0).
    ("--mtbf-node", "1e300h", ("--mtbf-node: 3.6e+303 s is not valid; expected at most", "or none")),
    ("--mtbf-gpu", "1e9d", ("--mtbf-gpu: 8.64e+13 s is not valid",)),
    # Before: 1e400 overflowed to inf, read as `none` (the component never fails), status 0.
    ("--mtbf-link", "1e400h", ("--mtbf-link: '1e400h' is not valid; the number is too large",)),
])
def test_goodput_mtbf_beyond_any_run_is_refused(flag, value, needles, capsys):
    args = GOODPUT + [flag, value]
    check_outcome(run_cli(args, capsys), args, "error", needles)


@pytest.mark.parametrize("value", ["80000h", "none", "1e6d"])
def test_goodput_mtbf_in_range_is_taken(value, capsys):
    args = GOODPUT + ["--mtbf-node", value]
    check_outcome(run_cli(args, capsys), args, "ok")


def test_plan_rank_goodput_mtbf_bound(capsys):
    args = ["plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "64", "--verify", "0", "--rank", "goodput",
            "--tokens", "1T", "--mtbf-gpu", "1e300h"]
    check_outcome(run_cli(args, capsys), args, "error", ("--mtbf-gpu: 3.6e+303 s is not valid",))


@pytest.mark.parametrize("key, value", [("mtbf_node", "1e300h"), ("mtbf_gpu", "1e400h"),
                                        ("mtbf_uplink", "{leaf-spine: 1e300h}")])
def test_mix_mtbf_beyond_any_run_is_refused(key, value, tmp_path, capsys):
    (tmp_path / "mix.yaml").write_text(
        "cluster: {link: infiniband, gpus: 16}\nhorizon: 1h\njobs:\n  - {model: gpt2, gpus: 8}\n"
        f"failures:\n  repair: 4h\n  {key}: {value}\n")
    args = ["mix", str(tmp_path / "mix.yaml")]
    check_outcome(run_cli(args, capsys), args, "error", (f"failures.{key}", "is not valid"))


def test_failure_rates_api_bound():
    from dpsim.errors import ConfigError
    from dpsim.plan.reliability import FailureRates

    with pytest.raises(ConfigError, match=r"^--mtbf-node: 1e\+20 s is not valid"):
        FailureRates(node_mtbf_s=1e20)
    FailureRates(node_mtbf_s=float("inf"), gpu_mtbf_s=1e13)


# --- calibrate: flags of a model step that does not run ----------------------------------------------------
@pytest.mark.parametrize("extra, needles", [
    # Before: each was dropped in silence and the collectives measured (status 0, minutes on a CPU host).
    (["--no-compute", "--micro-batch", "4"], ("--micro-batch: 4 applies to the --model step", "--no-compute")),
    (["--no-compute", "--optimizer", "sgd"], ("--optimizer: 'sgd' applies to the --model step",)),
    (["--micro-batch", "4"], ("--micro-batch: 4 applies to the --model step, and no --model is given",)),
    (["--optimizer", "sgd"], ("--optimizer: 'sgd' applies to the --model step, and no --model is given",)),
    (["--fresh-processes", "2"], ("--fresh-processes: 2 applies to the --model step",)),
    # Before: --name '' fell back to the --out file's stem.
    (["--name", ""], ("--name: '' is not valid; expected a non-empty profile name",)),
    (["--name", "  "], ("--name: '  ' is not valid",)),
    # Before: the same sweep was measured twice.
    (["--ops", "all_reduce,all_reduce"], ("--ops: 'all_reduce,all_reduce' repeats all_reduce; give each name once",)),
    (["--dtypes", "float32,float32"], ("--dtypes: 'float32,float32' repeats float32",)),
])
def test_calibrate_refuses_what_it_would_drop(extra, needles, tmp_path, capsys):
    pytest.importorskip("torch")
    args = CALIBRATE + ["--out", str(tmp_path / "p.json")] + extra
    check_outcome(run_cli(args, capsys), args, "error", needles)
    assert not (tmp_path / "p.json").exists()


# --- --moe-a2a hierarchical with no all-to-all --------------------------------------------------------------
MIXTRAL = ["--model", "mixtral-8x7b", "--gpus", "16", "--link", "infiniband"]


@pytest.mark.parametrize("args, needles", [
    # Before: the ep group is one rank, the all-to-all costs nothing, and the flag was dropped (status 0).
    (["predict", *MIXTRAL, "--moe-a2a", "hierarchical"], ("--moe-a2a: 'hierarchical' shapes the expert-parallel",
                                                          "--ep is 1")),
    (["predict", *MIXTRAL, "--moe-a2a", "hierarchical", "--tp", "2", "--sequence-parallel"], ("--ep is 1",)),
    (["goodput", *MIXTRAL, "--moe-a2a", "hierarchical", "--runs", "2"], ("--ep is 1",)),
    (["plan", "--model", "mixtral-8x7b", "--gpus", "16", "--global-batch", "64", "--verify", "0", "--moe-a2a",
      "hierarchical", "--ep", "1"], ("--moe-a2a: 'hierarchical' shapes the expert-parallel all-to-all of layouts with "
                                     "--ep 2 or more, and the search has none",)),
    # A dense model is still told it is dense (the more useful line).
    (["predict", "--model", "gpt2", "--gpus", "8", "--moe-a2a", "hierarchical"], ("gpt2 is dense",)),
])
def test_moe_a2a_without_expert_parallelism_is_refused(args, needles, capsys):
    check_outcome(run_cli(args, capsys), args, "error", needles)


def test_moe_a2a_with_expert_parallelism_is_taken(capsys):
    args = ["predict", *MIXTRAL, "--moe-a2a", "hierarchical", "--ep", "4"]
    check_outcome(run_cli(args, capsys), args, "ok")


def test_moe_a2a_api():
    import dpsim
    from dpsim.errors import ConfigError

    with pytest.raises(ConfigError, match="^--moe-a2a: 'hierarchical' shapes"):
        dpsim.memory_report(dpsim.PredictConfig(model="mixtral-8x7b", gpus=16, link="infiniband",
                                                moe_a2a="hierarchical"))


# --- the Python API: a variability spec of the wrong kind, a bool as a number -------------------------------
@pytest.mark.parametrize("spec", [None, {}, "noise_cv=0.1", 0.1, ("node0:2x",)])
def test_predict_with_variability_refuses_a_spec_of_another_kind(spec):
    """Before: AttributeError ('NoneType' object has no attribute 'noise_cv')."""
    import dpsim
    from dpsim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^spec: .* is not valid; expected a dpsim.VariabilitySpec"):
        dpsim.predict_with_variability(dpsim.PredictConfig(model="gpt2", gpus=8, link="nvlink"), spec)


@pytest.mark.parametrize("field, flag", [("noise_cv", "--noise-cv"), ("confidence", "confidence")])
def test_variability_spec_refuses_a_bool_as_a_number(field, flag):
    """Before: VariabilitySpec(noise_cv=True) ran with a 100 % CV (True is the int 1 to Python)."""
    from dpsim import VariabilitySpec
    from dpsim.errors import ConfigError

    with pytest.raises(ConfigError, match=f"^{flag}: True is not valid"):
        VariabilitySpec(**{field: True})


# --- an HTML output over a file the command reads (named .html) --------------------------------------------
def _files(d: Path) -> None:
    shutil.copy(ROOT / "topologies" / "nvlink.yaml", d / "topo.html")
    shutil.copy(ROOT / "calibration" / "profiles" / "aws-p4de-2node.json", d / "p.html")
    (d / "h.html").write_text("[1, 2, 3, 4, 5, 6, 7, 8]\n")
    (d / "mix.html").write_text("cluster: {link: infiniband, gpus: 16}\nhorizon: 1h\njobs:\n  - {model: gpt2, gpus: 8}\n")
    (d / "mix.yaml").write_text("cluster: {topology: topo.html, gpus: 16}\nhorizon: 1h\njobs:\n  - {model: gpt2, gpus: 8}\n")


@pytest.mark.parametrize("args, target, needles", [
    # Before: each wrote its page over the file it had just read (status 0).
    (["report", "--model", "gpt2", "--gpus", "8", "--topology", "{d}/topo.html", "-o", "{d}/topo.html"], "topo.html",
     ("-o/--output: ", "is the --topology file this command reads",)),
    (["predict", "--model", "gpt2", "--gpus", "8", "--topology", "{d}/topo.html", "--timeline", "{d}/topo.html"],
     "topo.html", ("--timeline: ", "is the --topology file",)),
    (["predict", "--model", "gpt2", "--gpus", "16", "--calibration", "{d}/p.html", "--timeline", "{d}/p.html"],
     "p.html", ("is the --calibration file",)),
    (["predict", "--model", "mixtral-8x7b", "--gpus", "8", "--link", "nvlink", "--ep", "8", "--moe-routing",
      "histogram:{d}/h.html", "--timeline", "{d}/h.html"], "h.html", ("is the --moe-routing file",)),
    (["mix", "{d}/mix.html", "--html", "{d}/mix.html"], "mix.html", ("--html: ", "is the mix file this command reads")),
    (["mix", "{d}/mix.yaml", "--html", "{d}/topo.html"], "topo.html", ("is the cluster.topology file",)),
])
def test_html_output_is_never_an_input(args, target, needles, tmp_path, capsys):
    _files(tmp_path)
    before = _digest(tmp_path / target)
    args = [a.format(d=tmp_path) for a in args]
    check_outcome(run_cli(args, capsys), args, "error", needles)
    assert _digest(tmp_path / target) == before


def test_input_files_of_a_config(tmp_path):
    import dpsim

    _files(tmp_path)
    config = dpsim.PredictConfig(model="mixtral-8x7b", gpus=8, topology_file="t.yaml", calibration="p.json",
                                 ep=8, moe_routing=f"histogram:{tmp_path}/h.html")
    assert config.input_files() == (("--topology", "t.yaml"), ("--calibration", "p.json"),
                                    ("--moe-routing", f"{tmp_path}/h.html"))
    assert dpsim.PredictConfig(model="gpt2").input_files() == ()


# --- an empty price read as no price ---------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["sweep", "--model", "gpt2", "--gpus", "8", "--link", "nvlink"],
                                     ["plan", "--model", "gpt2", "--gpus", "8", "--global-batch", "64", "--verify", "0"]])
@pytest.mark.parametrize("price", ["", " ", ",", "h100=1,,a100=2"])
def test_an_empty_gpu_hour_price_is_refused(command, price, capsys):
    """Before: the default prices were used in silence (status 0)."""
    args = command + ["--gpu-hour-usd", price]
    check_outcome(run_cli(args, capsys), args, "error", ("--gpu-hour-usd: ", "has an empty price"))


# --- an expert-activation offload on a dense model ---------------------------------------------------------
@pytest.mark.parametrize("command", ["predict", "goodput"])
def test_expert_activation_offload_on_a_dense_model_is_refused(command, capsys):
    """Before: --offload expert-activations with --tp 2 on llama-3-8b predicted the same step and memory as
    without it (status 0): a dense model has no expert GEMMs to offload."""
    args = [command, "--model", "llama-3-8b", "--gpus", "16", "--link", "infiniband", "--tp", "2", "--offload",
            "expert-activations"] + (["--runs", "2"] if command == "goodput" else [])
    check_outcome(run_cli(args, capsys), args, "error",
                  ("--offload: expert-activations offloads the MoE layers' expert activations, but llama-3-8b is dense",))


# --- a mix's checkpoint block without failures ---------------------------------------------------------------
@pytest.mark.parametrize("top, job, where", [
    # Before: no checkpoint is written without failures, and the block was dropped in silence (status 0).
    ("checkpoint: {interval: 1h}\n", "", "checkpoint: applies only to a mix with failures"),
    ("", ", checkpoint: {interval: 1h, write: 60s}", "jobs[0].checkpoint: applies only to a mix with failures"),
])
def test_mix_checkpoint_without_failures_is_refused(top, job, where, tmp_path, capsys):
    (tmp_path / "mix.yaml").write_text(f"cluster: {{link: infiniband, gpus: 16}}\nhorizon: 1h\n{top}"
                                       f"jobs:\n  - {{model: gpt2, gpus: 8{job}}}\n")
    args = ["mix", str(tmp_path / "mix.yaml")]
    check_outcome(run_cli(args, capsys), args, "error", (where, "add failures:"))
    # With failures: taken.
    (tmp_path / "mix.yaml").write_text(f"cluster: {{link: infiniband, gpus: 16}}\nhorizon: 1h\n{top}"
                                       f"failures: {{repair: 4h}}\njobs:\n  - {{model: gpt2, gpus: 8{job}}}\n")
    check_outcome(run_cli(args, capsys), args, "ok")


# --- report --scaling-gpus: empty items and repeats read in silence -----------------------------------------
@pytest.mark.parametrize("value, needle", [("8,,16", "without empty items"), ("8,16,", "without empty items"),
                                           ("8,8", "repeats 8; give each GPU count once")])
def test_report_scaling_gpus_list_is_strict(value, needle, tmp_path, capsys):
    args = ["report", "--model", "gpt2", "--gpus", "8", "-o", str(tmp_path / "r.html"), "--scaling-gpus", value]
    check_outcome(run_cli(args, capsys), args, "error", ("--scaling-gpus: ", needle))
    assert not (tmp_path / "r.html").exists()


def test_mtp_depth_on_another_decoder_names_the_value(capsys):
    """Before: '--mtp-depth: gpt2 is not a Llama-style decoder ...' named the model, not the value given."""
    args = ["predict", "--model", "gpt2", "--gpus", "8", "--link", "nvlink", "--mtp-depth", "2"]
    check_outcome(run_cli(args, capsys), args, "error", ("--mtp-depth: 2 adds multi-token prediction modules",
                                                         "gpt2 is not one"))


# --- dpsim.plan's base with a layout the search replaces ------------------------------------------------------
@pytest.mark.parametrize("field, needle", [
    # Before: each was replaced by the search in silence (tp=4 searched every tp; ep=2 on a dense model too).
    (dict(tp=4), "--tp: 4 on the base config is not used by plan (give tps=[4] to search it)"),
    (dict(ep=2), "--ep: 2 on the base config is not used by plan (give eps=[2]"),
    (dict(strategy="zero1"), "--strategy: 'zero1' on the base config is not used by plan (give strategies=['zero1']"),
    (dict(activation_checkpointing=True), "give recomputes=['full'] to search it"),
    (dict(global_batch=128), "give it as plan's global_batch=128"),
    # Before: "--jobs: ... --gpus 1 is less than one server" (a --gpus no one gave).
    (dict(jobs=2), "--jobs: 2 on the base config is not used by plan"),
])
def test_plan_refuses_a_layout_on_its_base(field, needle):
    import dpsim

    base = dpsim.PredictConfig(model="llama-3-8b", link="infiniband", gpus=16, **field)
    with pytest.raises(dpsim.DpsimError) as exc:
        dpsim.plan(base, gpus=[16], global_batch=64, verify=0)
    assert needle in str(exc.value)
