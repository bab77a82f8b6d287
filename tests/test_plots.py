"""Figures render (valid plotly JSON, non-empty traces) and say what the data says; the HTML
report is one standalone file; ``predict --timeline``; a headless-Chromium look when available."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import plotly.io as pio
import pytest

from dpsim.cli import main
from dpsim.errors import ConfigError
from dpsim.plan.sweep import sweep
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.report import plots
from dpsim.report.html import collect, render, scaling_gpu_counts, write_report


def check_figure(fig) -> dict:
    """The figure's JSON round-trips, and every trace has data."""
    text = fig.to_json()
    again = pio.from_json(text)
    assert json.loads(again.to_json()) == json.loads(text)
    doc = json.loads(text)
    assert doc["data"], "no traces"
    for trace in doc["data"]:
        values = trace.get("x") if trace.get("x") is not None else trace.get("y")
        assert values is not None and len(values) > 0, trace.get("name")
    assert doc["layout"]["title"]["text"]
    return doc


@pytest.fixture(scope="module")
def ib64():
    return predict(PredictConfig(gpus=64, link="infiniband", model="gpt2-xl", micro_batch=4))


def one_line(exc) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


# --------------------------------------------------------------------------- timeline

def test_timeline_shows_compute_buckets_and_exposed_comm(ib64):
    doc = check_figure(plots.timeline_figure(ib64))
    names = {t["name"] for t in doc["data"]}
    assert {"forward", "backward", "optimizer", "all-reduce (per bucket)", "exposed communication"} <= names
    comm = next(t for t in doc["data"] if t["name"] == "all-reduce (per bucket)")
    assert len(comm["x"]) == ib64.n_buckets  # one bar per bucket
    exposed = next(t for t in doc["data"] if t["name"] == "exposed communication")
    assert sum(exposed["x"]) == pytest.approx(ib64.simulation.steps[-1].exposed_comm_s * 1e3, rel=1e-9)
    assert sum(comm["x"]) == pytest.approx(ib64.comm_s * 1e3, rel=1e-9)
    # the last bar ends at the step's end
    opt = next(t for t in doc["data"] if t["name"] == "optimizer")
    assert opt["base"][-1] + opt["x"][-1] == pytest.approx(ib64.simulation.steps[-1].step_time_s * 1e3, rel=1e-9)


def test_timeline_without_overlap_exposes_everything():
    p = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", overlap=False))
    doc = check_figure(plots.timeline_figure(p, step=0))
    exposed = next(t for t in doc["data"] if t["name"] == "exposed communication")
    assert sum(exposed["x"]) == pytest.approx(p.comm_s * 1e3, rel=1e-9)
    with pytest.raises(ConfigError) as exc:
        plots.timeline_figure(p, step=7)
    assert "step 7" in one_line(exc)
    with pytest.raises(ConfigError):
        plots.timeline_figure(object())


def test_subtract_intervals():
    assert plots._subtract([(0, 10)], [(2, 3), (5, 7)]) == [(0, 2), (3, 5), (7, 10)]
    assert plots._subtract([(0, 1), (4, 6)], [(0, 5)]) == [(5, 6)]
    assert plots._subtract([(1, 2)], []) == [(1, 2)]
    assert plots._subtract([(1, 2)], [(0, 3)]) == []


# ---------------------------------------------------------------------------- scaling

@pytest.fixture(scope="module")
def scaling_df():
    return sweep(gpus=[1, 8, 16, 64], link=["nvlink", "ethernet"], model="gpt2", micro_batch=8, tokens="10B")


def test_scaling_figure(scaling_df):
    doc = check_figure(plots.scaling_figure(scaling_df))
    names = [t["name"] for t in doc["data"]]
    assert "nvlink" in names and "ethernet" in names and "ideal (N x one GPU)" in names
    ideal = next(t for t in doc["data"] if t["name"] == "ideal (N x one GPU)")
    single = scaling_df.single_gpu_samples_per_s.iloc[0] * 1024
    assert ideal["y"] == pytest.approx([single * n for n in ideal["x"]])
    eff = [t for t in doc["data"] if t["name"] == "ethernet"][1]
    assert eff["y"] == pytest.approx(list(100 * scaling_df[scaling_df.link == "ethernet"].scaling_efficiency))
    # from predictions too, and samples/s on request
    preds = [predict(PredictConfig(gpus=n, link="nvlink", model="resnet50", micro_batch=32)) for n in (1, 8, 16)]
    doc = check_figure(plots.scaling_figure(preds))
    assert "samples/s" in json.dumps(doc["layout"])
    with pytest.raises(ConfigError):
        plots.scaling_figure(scaling_df, metric="flops")


def test_scaling_lines_split_by_whatever_varies():
    df = sweep(gpus=[8, 16], link="infiniband", model=["gpt2", "gpt2-medium"])
    doc = check_figure(plots.scaling_figure(df))
    names = {t["name"] for t in doc["data"]}
    assert {"infiniband, gpt2", "infiniband, gpt2-medium"} <= names


def test_cost_figure(scaling_df):
    doc = check_figure(plots.cost_figure(scaling_df))
    assert "10B tokens" in doc["layout"]["title"]["text"]
    with pytest.raises(ConfigError) as exc:
        plots.cost_figure(sweep(gpus=[8], model="gpt2"))
    assert "tokens=" in one_line(exc)


# ----------------------------------------------------------------------------- memory

def test_memory_figure_stacks_every_category():
    p7 = predict(PredictConfig(gpus=8, link="nvlink", model="llama-2-7b", micro_batch=1))
    pg = predict(PredictConfig(gpus=8, link="nvlink", model="gpt2-xl"))
    doc = check_figure(plots.memory_figure([("7B", p7.memory), ("GPT-2 XL", pg)]))
    bars = [t for t in doc["data"] if t["type"] == "bar"]
    assert len(bars) == 6
    total = [sum(t["y"][i] for t in bars) for i in range(2)]
    assert total == pytest.approx([p7.memory.total_bytes / 1e9, pg.memory.total_bytes / 1e9])
    text = json.dumps(doc["layout"]["annotations"])
    assert "DOES NOT FIT" in text and "fits" in text
    capacity = p7.memory.capacity_bytes / 1e9  # the default GPU's 80 GiB, 85.9 GB
    assert any(s.get("y0") == pytest.approx(capacity) for s in doc["layout"]["shapes"])  # capacity line


def test_memory_figure_with_mixed_capacities_and_errors():
    a = predict(PredictConfig(gpus=8, link="nvlink", model="gpt2", gpu="a100")).memory
    b = predict(PredictConfig(gpus=8, link="nvlink", model="gpt2", gpu="b200")).memory
    doc = check_figure(plots.memory_figure({"a100": a, "b200": b}))
    caps = next(t for t in doc["data"] if t["name"] == "GPU capacity")
    assert caps["y"] == pytest.approx([80 * 2**30 / 1e9, 180.0])  # A100: 81,920 MiB as NVML reports it
    for bad, needle in [([], "no items"), ([("x", 3)], "expected a MemoryBreakdown"), ([("x",)], "pair"),
                        ([("x", a), ("x", b)], "repeat")]:
        with pytest.raises(ConfigError) as exc:
            plots.memory_figure(bad)
        assert needle in one_line(exc)


# ---------------------------------------------------------------------------- buckets

def test_bucket_figure_marks_the_best_cap():
    df = sweep(gpus=[64, 256], link="infiniband", model="gpt2-xl", bucket_cap_mb=[None, 1, 25, 200, 4000])
    doc = check_figure(plots.bucket_figure(df))
    stars = [t for t in doc["data"] if t.get("marker", {}).get("symbol") == "star"]
    assert len(stars) == 2
    for star, gpus in zip(stars, (64, 256)):
        sized = df[(df.gpus == gpus) & df.bucket_cap_mb.notna()]
        best = sized.loc[sized.step_time_s.idxmin()]
        assert star["x"] == [best.bucket_cap_mb]
        assert best.bucket_cap_mb not in (1, 4000)  # the U shape: the optimum is inside the range
    assert any("PyTorch default" in t["name"] for t in doc["data"])
    with pytest.raises(ConfigError):
        plots.bucket_figure(sweep(gpus=[8], model="gpt2"))


def test_records_accepts_rows_and_rejects_junk(scaling_df):
    rows = scaling_df.to_dict(orient="records")
    assert len(plots.records(rows)) == len(rows)
    with pytest.raises(ConfigError):
        plots.records([])
    with pytest.raises(ConfigError):
        plots.records([1, 2])
    with pytest.raises(ConfigError):
        plots.scaling_figure([{"gpus": 8}])


def test_plots_module_does_not_import_plotly_at_import_time_and_predict_imports_no_plotting_or_dataframes():
    # One fresh process (each costs half a second on 2 cores) for two checks in turn: importing the report,
    # plot and sweep modules loads neither plotly nor pandas; then `dpsim predict --gpus 16 --json` loads
    # none of them nor torch. Torch too: this is the one check that that command never imports it
    # (tests/test_cli.py ran the same command in a second process for torch alone).
    code = ("import sys, dpsim.report.plots, dpsim.report.html, dpsim.plan.sweep, dpsim.plan.cost; "
            "print('plotly' in sys.modules, 'pandas' in sys.modules); "
            "from dpsim.cli import main; rc = main(['predict', '--gpus', '16', '--json']); "
            "print(sorted(m for m in ('plotly', 'pandas', 'dask', 'distributed', 'torch', 'pyarrow') if m in sys.modules)); "
            "sys.exit(rc)")  # the command's own status too: check=True fails on anything but 0
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip().splitlines()
    assert lines[0].split() == ["False", "False"]
    assert lines[-1] == "[]"


# ----------------------------------------------------------------------------- report

def test_scaling_gpu_counts():
    assert scaling_gpu_counts(64, 8) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert scaling_gpu_counts(24, 8) == [1, 2, 4, 8, 16, 24, 32, 64]
    assert scaling_gpu_counts(12, 6) == [1, 2, 4, 6, 12, 24, 48]


@pytest.fixture(scope="module")
def report_html(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(path, PredictConfig(gpus=32, link="ethernet", model="gpt2-large", micro_batch=4), tokens="50B")
    return path


def test_report_is_standalone(report_html):
    html = report_html.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]*\bsrc=", html), "no external scripts"
    assert "cdn.plot.ly" not in html.split("</script>", 1)[1]  # outside the inlined plotly.js bundle
    assert html.count("<script") >= 6 and len(html) > 3_000_000  # plotly.js inlined once + figures
    for div in ("fig-timeline", "fig-scaling", "fig-memory", "fig-buckets", "fig-cost"):
        assert f'id="{div}"' in html
    for text in ("step time", "all-reduce exposed", "memory per GPU", "time to train", "price source",
                 "DDP bucket buffers", "dpsim.prediction/1"):
        assert text in html
    doc = json.loads(html.split('<pre>', 1)[1].split("</pre>")[0].replace("&quot;", '"'))
    assert doc["schema"] == "dpsim.prediction/1" and doc["n_gpus"] == 32


def test_report_figures_are_valid():
    data = collect(PredictConfig(gpus=16, link="infiniband", model="gpt2"), tokens="1B")
    from dpsim.report.html import figures
    figs = figures(data)
    assert set(figs) == {"timeline", "scaling", "memory", "buckets", "cost"}
    for fig in figs.values():
        check_figure(fig)
    assert {r["link"] for r in data.scaling_rows} == {"infiniband", "nvlink", "ethernet"}
    html = render(data)
    assert "gpt2 on 16 x h100 [infiniband]" in html


def test_cli_report_and_timeline(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    out_file = tmp_path / "r.html"
    rc = main(["report", "--gpus", "16", "--link", "infiniband", "--model", "gpt2", "-o", str(out_file),
               "--scaling-gpus", "8,16,32", "--gpu-hour-usd", "2"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "report written to" in out and out_file.stat().st_size > 3_000_000
    assert "$2.000" in out_file.read_text(encoding="utf-8")
    tl = tmp_path / "tl.html"
    rc = main(["predict", "--gpus", "16", "--link", "infiniband", "--model", "gpt2", "--json", "--timeline", str(tl)])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    assert json.loads(out)["n_gpus"] == 16
    text = tl.read_text(encoding="utf-8")
    assert "Plotly.newPlot" in text and not re.search(r"<script[^>]*\bsrc=", text)


@pytest.mark.parametrize("args, needle", [
    (["report", "-o", "report.pdf"], "-o/--output: 'report.pdf' is not an .html file"),
    (["report", "-o", "/nonexistent/dir/r.html"], "does not exist"),
    (["report", "--gpus", "0", "-o", "x.html"], "--gpus"),
    (["report", "--tokens", "1T", "--samples", "1M", "-o", "x.html"], "one budget"),
    (["report", "--scaling-gpus", "8,x", "-o", "x.html"], "--scaling-gpus: 'x'"),
    (["report", "--model", "resnet50", "--tokens", "1T", "-o", "x.html"], "--samples"),
    (["predict", "--timeline", "t.png"], "--timeline: 't.png' is not an .html file"),
    # fuzz5: GPU counts of the user's that the job cannot run on were dropped from the figure in silence.
    (["report", "--model", "gpt2", "--gpus", "8", "--link", "nvlink", "--scaling-gpus", "8,12", "-o", "x.html"],
     "--scaling-gpus: 12 cannot be predicted for this job: --gpus: 12 is not a multiple of --gpus-per-node=8"),
    (["report", "--model", "llama-2-7b", "--gpus", "16", "--link", "dgx-a100", "--pp", "4", "--micro-batch", "1",
      "--global-batch", "64", "--scaling-gpus", "16,18", "-o", "x.html"],
     "--scaling-gpus: 18 is not a multiple of --tp x --cp x --pp = 4"),
])
def test_cli_report_errors_are_one_line(tmp_path, capsys, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    rc = main(args)
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err
    assert not list(tmp_path.iterdir())  # nothing written


# --------------------------------------------------------------- headless browser look

def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary (apt-get install chromium)")
def test_report_renders_in_headless_chromium(report_html, tmp_path):
    """Chromium runs the page's JavaScript offline: every figure draws its SVG, and a
    screenshot comes out (look at it: tests write it next to the report)."""
    browser = _chromium()
    base = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--virtual-time-budget=10000", "--window-size=1280,5200"]
    dom = subprocess.run(base + ["--dump-dom", report_html.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('class="main-svg"') >= 2 * 5, "a plotly figure did not render"  # 2 SVG layers each
    assert "Plotly is not defined" not in dom.stdout
    png = report_html.with_suffix(".png")
    shot = subprocess.run(base + [f"--screenshot={png}", report_html.as_uri()], capture_output=True, text=True,
                          timeout=120)
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.stat().st_size > 100_000
