"""Sweeps: grid specs (flags, YAML, Python), strict validation, rows, outputs, Dask = serial."""

from __future__ import annotations

import json
import math
import time

import pandas as pd
import pytest

from dpsim.cli import main
from dpsim.errors import ConfigError, DpsimError
from dpsim.plan.grid import SweepSpec
from dpsim.plan.sweep import (
    prediction_record,
    read_results,
    run_sweep,
    sweep,
    sweep_records,
    write_results,
)
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert message and "\n" not in message
    return message


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


SMALL = {"gpus": [8, 16], "link": ["nvlink", "ethernet"], "model": "gpt2", "micro_batch": [2, 4]}


# ------------------------------------------------------------------------------ spec

def test_grid_order_types_and_aliases():
    spec = SweepSpec.from_grid({"gpus": ["8", 16], "micro-batch": 4, "overlap": ["on", "off"],
                                "bucket_cap_mb": ["default", 25], "topology": None})
    assert spec.size == 2 * 2 * 2
    assert spec.axes["gpus"] == (8, 16)
    assert spec.axes["micro_batch"] == (4,)
    assert spec.axes["overlap"] == (True, False)
    assert spec.axes["bucket_cap_mb"] == (None, 25.0)
    assert spec.axes["topology_file"] == (None,)
    assert spec.varying == ["gpus", "overlap", "bucket_cap_mb"]
    configs = spec.configs()
    assert configs[0] == PredictConfig(gpus=8, micro_batch=4, overlap=True, bucket_cap_mb=None)
    assert configs[1] == PredictConfig(gpus=8, micro_batch=4, overlap=True, bucket_cap_mb=25.0)  # last axis fastest
    assert configs[-1] == PredictConfig(gpus=16, micro_batch=4, overlap=False, bucket_cap_mb=25.0)


@pytest.mark.parametrize("grid, needles", [
    ({"gpu_count": [8]}, ["'gpu_count' is not a sweep axis", "gpus", "micro_batch"]),
    ({"gpus": ["eight"]}, ["gpus", "'eight'", "an integer"]),
    ({"gpus": [8.5]}, ["gpus", "8.5", "an integer"]),
    ({"gpus": [True]}, ["gpus", "True"]),
    ({"gpus": [0]}, ["gpus", "0", ">= 1"]),
    ({"gpus": []}, ["gpus", "no values"]),
    ({"gpus": [8, 8]}, ["gpus", "repeats"]),
    ({"link": ["infiniband", "token-ring"]}, ["link", "'token-ring'", "nvlink"]),
    ({"model": ["gpt3"]}, ["model", "'gpt3'", "gpt2-xl"]),
    ({"gpu": ["tpu"]}, ["gpu", "'tpu'", "h100"]),
    ({"precision": ["fp8"]}, ["precision", "'fp8'", "bf16-mixed"]),
    ({"optimizer": ["lion"]}, ["optimizer", "'lion'", "adamw"]),
    ({"overlap": ["maybe"]}, ["overlap", "'maybe'", "true/false"]),
    ({"bucket_cap_mb": [-5]}, ["bucket_cap_mb", "-5", "> 0"]),
    ({"bucket_cap_mb": ["nan"]}, ["bucket_cap_mb", "'nan'"]),
    ({"compute_efficiency": [1.5]}, ["compute_efficiency", "1.5", ">= 0.01 and <= 1"]),
    ({"micro_batch": [None]}, ["micro_batch", "None", "an integer"]),
    ({"topology": ["/nonexistent/x.yaml"]}, ["topology_file", "cannot read"]),
    ({"strategy": ["ddp", "zero4"]}, ["strategy", "'zero4'", "zero3"]),
    ({"fsdp_unit": ["tile"]}, ["fsdp_unit", "'tile'", "block"]),
    ({"placement": ["random"]}, ["placement", "'random'", "interleaved"]),
    ({"jobs": [0]}, ["jobs", "0", ">= 1"]),
    ({"grad_accum": [0]}, ["grad_accum", "0", ">= 1"]),
    ({"algo": ["ring", "foo"]}, ["algo", "'foo'", "halving_doubling"]),
    ({"single_gpu_step_s": [0]}, ["single_gpu_step_s", "0", ">= 0.001 ms"]),
])
def test_grid_errors_name_axis_value_and_allowed(grid, needles):
    with pytest.raises(ConfigError) as exc:
        SweepSpec.from_grid(grid)
    message = one_line(exc)
    for needle in needles:
        assert needle in message, message


def test_a_combination_the_config_refuses_names_the_point():
    spec = SweepSpec.from_grid({"strategy": ["ddp", "zero3"], "bucket_cap_mb": [25]})
    with pytest.raises(ConfigError) as exc:
        spec.configs()
    message = one_line(exc)
    assert message.startswith("sweep point strategy=zero3: --bucket-cap-mb: 25.0")
    assert "--fsdp-unit" in message


def test_budget_and_prices_are_validated():
    assert SweepSpec.from_grid({}, tokens="1T").tokens == 1e12
    with pytest.raises(ConfigError):
        SweepSpec.from_grid({}, tokens="1T", samples="1M")
    with pytest.raises(ConfigError) as exc:
        SweepSpec.from_grid({}, gpu_hour_usd={"h1000": 2})
    assert "h1000" in one_line(exc)
    with pytest.raises(ConfigError) as exc:
        sweep_records(SweepSpec.from_grid({"model": ["gpt2", "resnet50"]}, tokens="1T"))
    assert "resnet50" in one_line(exc) and "--samples" in str(exc.value)


def test_yaml_spec(tmp_path):
    # Whether the package mapping exists or not (a regular install, tests run from the checkout).
    from dpsim.shipped import shipped_dir

    (tmp_path / "topo.yaml").write_text((shipped_dir("dpsim.topologies") / "infiniband.yaml").read_text())
    path = tmp_path / "sweep.yaml"
    path.write_text("grid:\n  gpus: [8, 16]\n  topology: topo.yaml\n  model: gpt2\n  bucket_cap_mb: [null, 25]\n"
                    "tokens: 10B\ngpu_hour_usd: {h100: 2.5}\n")
    spec = SweepSpec.from_yaml(path)
    assert spec.size == 4 and spec.tokens == 1e10 and spec.gpu_hour_usd == {"h100": 2.5}
    assert spec.axes["topology_file"] == (str(tmp_path / "topo.yaml"),)  # relative to the YAML file
    df = run_sweep(spec)
    assert set(df.usd_per_gpu_hour) == {2.5}
    assert (df.topology == "infiniband").all()


@pytest.mark.parametrize("text, needles", [
    ("gpus: [8]\n", ["'gpus' is not a sweep key", "grid"]),
    ("grid:\n  gpus: [8]\nprice: 3\n", ["'price' is not a sweep key"]),
    ("tokens: 1T\n", ["grid is missing"]),
    ("- 8\n- 16\n", ["expected a mapping"]),
    ("grid: [8, 16]\n", ["grid is list"]),
    ("grid:\n  gpus: [8\n", ["not valid YAML", "line"]),
    ("grid:\n  gpus: [8, x]\n", ["grid gpus", "'x'"]),
    ("grid:\n  gpus: [8]\n  gpus: [16]\n", ["not valid YAML", "'gpus' appears twice"]),
    ("grid:\n  gpus: [8]\ntokens: lots\n", [": tokens: 'lots'"]),
    ("grid:\n  gpus: [8]\ngpu_hour_usd: {tpu: 1}\n", ["gpu_hour_usd", "'tpu'"]),
])
def test_yaml_errors(tmp_path, text, needles):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        SweepSpec.from_yaml(path)
    message = one_line(exc)
    assert str(path) in message
    for needle in needles:
        assert needle in message, message


def test_missing_yaml_file(tmp_path):
    with pytest.raises(ConfigError) as exc:
        SweepSpec.from_yaml(tmp_path / "nope.yaml")
    assert "--config" in one_line(exc)


# ------------------------------------------------------------------------------ rows

def test_rows_equal_direct_predictions():
    df = sweep(SMALL, tokens="1B")
    assert len(df) == 8
    assert list(df.columns[:3]) == ["gpus", "link", "topology_file"]
    for row in df.to_dict(orient="records"):
        p = predict(PredictConfig(gpus=row["gpus"], link=row["link"], model="gpt2", micro_batch=row["micro_batch"]))
        assert row["step_time_s"] == p.step_time_s
        assert row["scaling_efficiency"] == p.scaling_efficiency
        assert row["memory_total_bytes"] == p.memory.total_bytes
        assert row["gpu"] == "h100" and row["n_gpus"] == row["gpus"]
        assert row["usd_per_hour"] == pytest.approx(row["gpus"] * row["usd_per_gpu_hour"])
        assert row["time_to_train_s"] == pytest.approx(1e9 / p.tokens_per_s)
        assert row["cost_usd"] == pytest.approx(row["gpu_hours"] * row["usd_per_gpu_hour"])


def test_prediction_record_is_flat():
    row = prediction_record(predict(PredictConfig(gpus=16, link="infiniband", model="gpt2")))
    assert all(not isinstance(v, (dict, list, tuple)) for v in row.values())
    assert {"memory_fits", "ring_channels", "ring_bottleneck_link_classes", "step_time_s"} <= set(row)
    assert "schema" not in row and "config" not in row


def test_invalid_point_stops_or_is_recorded():
    grid = {"gpus": [8, 12], "link": "nvlink", "model": "gpt2"}
    with pytest.raises(DpsimError) as exc:
        sweep(grid)
    assert one_line(exc).startswith("sweep point gpus=12")
    df = sweep(grid, skip_invalid=True)
    assert df.error.isna().tolist() == [True, False]
    assert "multiple" in df.error.iloc[1]
    assert math.isnan(df.step_time_s.iloc[1]) and df.step_time_s.iloc[0] > 0


def test_a_refused_combination_is_that_points_error_with_skip_invalid(capsys):
    """PredictConfig refusing one combination (a bucket cap with ZeRO-3) is that point's error,
    not the sweep's: its config is built inside the point."""
    grid = {"gpus": 8, "model": "gpt2", "strategy": ["ddp", "zero3"], "bucket_cap_mb": [25]}
    df = sweep(grid, skip_invalid=True)
    assert df.strategy.tolist() == ["ddp", "zero3"]
    assert df.error.isna().tolist() == [True, False] and "--bucket-cap-mb" in df.error.iloc[1]
    assert df.bucket_cap_mb.tolist() == [25.0, 25.0] and df.step_time_s.iloc[0] > 0
    rc, out, err = run_cli(capsys, "sweep", "--gpus", "8", "--model", "gpt2", "--strategy", "ddp,zero3",
                           "--bucket-cap-mb", "25", "--skip-invalid", "--json", "--no-progress")
    assert rc == 0, err
    rows = json.loads(out)["rows"]
    assert rows[0]["error"] is None and "--bucket-cap-mb" in rows[1]["error"]
    # Without --skip-invalid the sweep stops before any point runs, naming the point.
    rc, out, err = run_cli(capsys, "sweep", "--gpus", "8", "--model", "gpt2", "--strategy", "ddp,zero3",
                           "--bucket-cap-mb", "25", "--no-progress")
    assert rc == 2 and "sweep point strategy=zero3" in err


def test_points_share_work_and_give_the_same_rows():
    """Topologies, models, compute times, step programs and collective costs are computed once
    per distinct input (dpsim.predict.memo, the NCCL model's shared caches); rows do not change."""
    from dpsim.predict import memo

    spec = SweepSpec.from_grid({"gpus": [8, 16], "link": ["infiniband", "ethernet"], "model": ["gpt2"],
                                "micro_batch": [1, 2]})
    memo.clear()
    shared = sweep_records(spec)
    cold = []
    for point in spec.points():
        memo.clear()
        cold.append(prediction_record(predict(PredictConfig(**point))))
    assert [{k: r[k] for k in c} for r, c in zip(shared, cold)] == cold
    assert len(memo._CACHES["dpsim.workload.catalog.get_model"]) == 1


@pytest.mark.slow
def test_local_workers_start_only_when_they_pay_off(monkeypatch):
    """--workers on a small grid runs serially (no cluster start-up); when the points left would
    take longer than LOCAL_CLUSTER_PAYOFF_S the rest runs on local workers, with the serial rows,
    and no worker process outlives the sweep."""
    import multiprocessing

    import dpsim.plan.sweep as sweep_module

    spec = SweepSpec.from_grid({"gpus": [8, 16, 64], "link": ["nvlink", "infiniband"], "model": ["gpt2"]})
    serial = sweep_records(spec)
    before = set(multiprocessing.active_children())   # other tests' processes, if any
    started = []
    real = sweep_module._run_dask
    monkeypatch.setattr(sweep_module, "_run_dask", lambda *a, **k: (started.append(a[2]), real(*a, **k)))
    assert sweep_records(spec, workers=2) == serial and started == []
    monkeypatch.setattr(sweep_module, "LOCAL_CLUSTER_PAYOFF_S", 0.0)
    assert sweep_records(spec, workers=2) == serial and started == [1]   # after one point, serially
    assert set(multiprocessing.active_children()) <= before


def test_sweep_keyword_axes_and_duplicates():
    assert len(sweep(gpus=[8, 16], model="gpt2")) == 2
    with pytest.raises(ConfigError):
        sweep({"gpus": [8]}, gpus=[16])


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json"])
def test_write_and_read_results(tmp_path, suffix):
    spec = SweepSpec.from_grid(SMALL, tokens="1B")
    df = run_sweep(spec)
    path = write_results(df, tmp_path / f"out{suffix}", spec)
    back = read_results(path)
    assert len(back) == len(df)
    pd.testing.assert_series_equal(back.step_time_s, df.step_time_s, check_exact=False, rtol=1e-12)
    assert back.link.tolist() == df.link.tolist()
    if suffix == ".json":
        doc = json.loads(path.read_text())
        assert doc["schema"] == "dpsim.sweep/1" and doc["axes"]["gpus"] == [8, 16] and doc["tokens"] == 1e9


def test_write_results_rejects_unknown_extension(tmp_path):
    df = sweep(gpus=8, model="gpt2")
    with pytest.raises(ConfigError) as exc:
        write_results(df, tmp_path / "out.xlsx")
    assert ".csv" in one_line(exc)
    with pytest.raises(ConfigError):
        write_results(df, tmp_path / "missing" / "out.csv")


def test_executor_validation():
    spec = SweepSpec.from_grid({"gpus": [8]})
    for kwargs, needle in [(dict(workers=0), "--workers"), (dict(workers=2.5), "--workers"),
                           (dict(scheduler="localhost:8786"), "--scheduler"),
                           (dict(scheduler="tcp://h:1", workers=2), "give one")]:
        with pytest.raises(ConfigError) as exc:
            sweep_records(spec, **kwargs)
        assert needle in one_line(exc)


def test_unreachable_scheduler_is_one_line():
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as exc:
        # dask retries a refused connection until the timeout: a quarter second is the same refusal, 0.75 s sooner.
        sweep_records(SweepSpec.from_grid({"gpus": [8]}), scheduler="tcp://127.0.0.1:1", connect_timeout_s=0.25)
    assert "cannot connect" in one_line(exc)
    assert time.perf_counter() - t0 < 15


# ----------------------------------------------------------------------- Dask cluster

@pytest.mark.slow
def test_dask_local_cluster_matches_serial(tmp_path, capsys):
    """A real 2-process LocalCluster (by address, as --scheduler does) and --workers 2 give
    exactly the serial rows."""
    from distributed import LocalCluster

    grid = {"gpus": [8, 16, 64], "link": ["nvlink", "infiniband", "ethernet"], "model": ["gpt2", "bert-large"],
            "bucket_cap_mb": [None, 100]}
    spec = SweepSpec.from_grid(grid, tokens="10B")
    serial = run_sweep(spec)
    t0 = time.perf_counter()
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster:
        parallel = run_sweep(spec, scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(serial, parallel, check_exact=True)

    args = ["sweep", "--gpus", "8,16,64", "--link", "nvlink,infiniband,ethernet", "--model", "gpt2,bert-large",
            "--bucket-cap-mb", "default,100", "--tokens", "10B", "--no-progress"]
    rc, _, err = run_cli(capsys, *args, "-o", str(tmp_path / "serial.parquet"))
    assert rc == 0, err
    rc, out, err = run_cli(capsys, *args, "--workers", "2", "-o", str(tmp_path / "dask.parquet"))
    assert rc == 0, err
    assert "36 rows written" in out
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "serial.parquet"),
                                  pd.read_parquet(tmp_path / "dask.parquet"), check_exact=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "dask.parquet"), serial, check_exact=True,
                                  check_dtype=False)
    # ~3-6 s on an idle 2-core machine; the bound only catches a hang, not a busy machine.
    assert time.perf_counter() - t0 < 120


# -------------------------------------------------------------------------------- CLI

def test_cli_sweep_table_and_json(capsys):
    rc, out, err = run_cli(capsys, "sweep", "--gpus", "8,16", "--link", "nvlink,ethernet", "--model", "gpt2",
                           "--tokens", "1B")
    assert rc == 0 and err == ""
    assert "dpsim sweep: 4 points" in out and "ethernet" in out and "cost" in out
    rc, out, err = run_cli(capsys, "sweep", "--gpus", "8,16", "--model", "gpt2", "--axis", "flash_attention=true,false",
                           "--gpu-hour-usd", "h100=2", "--json")
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert doc["schema"] == "dpsim.sweep/1" and len(doc["rows"]) == 4
    assert {r["usd_per_gpu_hour"] for r in doc["rows"]} == {2.0}
    assert [r["flash_attention"] for r in doc["rows"]] == [True, False, True, False]


def test_cli_sweep_yaml_with_flag_override(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("grid:\n  gpus: [8, 16, 32]\n  model: gpt2\n  link: [nvlink, infiniband]\n")
    rc, out, _ = run_cli(capsys, "sweep", "-c", str(path), "--gpus", "64", "--json")
    assert rc == 0
    rows = json.loads(out)["rows"]
    assert [(r["gpus"], r["link"]) for r in rows] == [(64, "nvlink"), (64, "infiniband")]


@pytest.mark.parametrize("args, needles", [
    (["--gpus", "8,x"], ["--gpus: 'x'", "integer"]),
    (["--gpus", "8,,16"], ["--gpus", "empty"]),
    (["--link", "nvlink,token-ring"], ["--link: 'token-ring'", "infiniband"]),
    (["--model", "gpt3"], ["--model: 'gpt3'"]),
    (["--overlap", "maybe"], ["--overlap: 'maybe'"]),
    (["--strategy", "ddp,zero4"], ["--strategy: 'zero4'", "fsdp-hybrid"]),
    (["--precision", "fp8"], ["--precision: 'fp8'", "fp16-mixed"]),
    (["--axis", "foo=1"], ["--axis: 'foo' is not a sweep axis"]),
    (["--axis", "gpus"], ["--axis: 'gpus'", "NAME=V1,V2"]),
    # An axis given twice: the later flag silently replaced the earlier (other points than asked for).
    (["--axis", "gpus=8", "--axis", "gpus=16"], ["--axis gpus: the axis is also given by --axis gpus"]),
    (["--gpus", "16", "--axis", "gpus=8"], ["--axis gpus: the axis is also given by --gpus"]),
    (["--micro-batch", "2", "--axis", "micro-batch=1"], ["--axis micro-batch", "also given by --micro-batch"]),
    (["--workers", "0"], ["--workers: 0"]),
    (["--scheduler", "localhost"], ["--scheduler: 'localhost'", "tcp://"]),
    (["--workers", "2", "--scheduler", "tcp://x:1"], ["--scheduler and --workers"]),
    (["-o", "out.xlsx"], ["-o/--output", ".parquet"]),
    (["--tokens", "lots"], ["--tokens: 'lots'"]),
    (["--model", "resnet50", "--tokens", "1T"], ["--tokens", "resnet50"]),
    (["--gpu-hour-usd", "h100=x"], ["--gpu-hour-usd", "'x'"]),
    (["--config", "/nonexistent.yaml"], ["--config", "cannot read"]),
    (["--gpus", "12", "--link", "nvlink"], ["sweep point gpus=12", "multiple"]),
])
def test_cli_sweep_errors_are_one_line(capsys, args, needles):
    rc, out, err = run_cli(capsys, "sweep", *args)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpsim: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_model_axis_takes_what_predict_takes(capsys, tmp_path):
    # --model's help offers a shape and a torch builder. The shape's own commas split it into
    # values of their own ("layers, heads, vocab, seq missing"), and a builder was refused as
    # "not a catalog model", from the command line, a sweep file and dpsim.sweep alike.
    shape = "transformer:hidden=64,layers=2,heads=4,vocab=1000,seq=128,ffn=128"
    rc, out, err = run_cli(capsys, "sweep", "--gpus", "8", "--link", "nvlink", "--model", f"{shape},gpt2", "--json")
    assert rc == 0, err
    assert [r["model"] for r in json.loads(out)["rows"]] == ["transformer", "gpt2"]
    builder = tmp_path / "net.py"
    builder.write_text("import torch\ndef build():\n    return torch.nn.Linear(16, 16)\n")
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"grid: {{gpus: [8, 16], link: [nvlink], model: ['{builder}:build'], input_shape: ['4,16']}}\n")
    rc, out, err = run_cli(capsys, "sweep", "--config", str(spec), "--json")
    assert rc == 0, err
    assert [r["n_gpus"] for r in json.loads(out)["rows"]] == [8, 16]
    spec.write_text(f"grid: {{gpus: [8], model: ['{tmp_path / 'gone.py'}:build']}}\n")
    rc, _, err = run_cli(capsys, "sweep", "--config", str(spec))
    assert rc == 2 and "grid model" in err and "does not exist" in err


def test_a_sweep_file_reads_its_model_and_profile_files_next_to_itself(capsys, tmp_path, monkeypatch):
    # Its topology was read next to it, a relative builder file or profile from the working directory.
    import shutil

    from dpsim.profile.io import shipped_profiles_dir

    (tmp_path / "net.py").write_text("import torch\ndef build():\n    return torch.nn.Linear(16, 16)\n")
    shutil.copy(shipped_profiles_dir() / "a100-nvswitch-8gpu.json", tmp_path / "p.json")
    (tmp_path / "s.yaml").write_text("grid: {gpus: [8], link: [nvlink], model: ['net.py:build'], "
                                     "input_shape: ['4,16'], calibration: [p.json, null]}\n")
    monkeypatch.chdir(tmp_path.parent)
    rc, out, err = run_cli(capsys, "sweep", "--config", str(tmp_path / "s.yaml"), "--json")
    assert rc == 0, err
    assert len(json.loads(out)["rows"]) == 2


def test_the_results_never_replace_the_sweep_file(capsys, tmp_path):
    # A sweep file may be JSON (YAML reads it): -o on the same file replaced the grid with the results.
    grid = tmp_path / "grid.json"
    grid.write_text('{"grid": {"gpus": [8], "link": ["nvlink"], "model": ["gpt2"]}}\n')
    before = grid.read_text()
    rc, _, err = run_cli(capsys, "sweep", "--config", str(grid), "-o", str(grid))
    assert rc == 2 and "is the --config file" in err and grid.read_text() == before
