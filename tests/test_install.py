"""The install: torch is an extra, the core works without it, and a wheel holds every package.

``pip install -e .`` must not pull PyTorch (on the public index that is ~2.7 GB of CUDA
wheels) since predict, memory, collective, sweep and report never import it; calibrate,
validate and a torch-module ``--model`` need ``pip install 'dpsim[torch]'`` and say so in
one line. Checked on pyproject.toml itself, then by running the commands in a subprocess
where ``import torch`` fails (a meta-path finder that refuses it, as on a machine without
torch), then by building the wheel and listing what it ships.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name for r in requirements}


def test_torch_is_an_extra_pinned_to_the_cpu_wheel_at_hand():
    assert "torch" not in _names(PYPROJECT["dependencies"])
    (torch,) = [Requirement(r) for r in PYPROJECT["optional-dependencies"]["torch"]]
    assert torch.name == "torch" and Version("2.13.0") in torch.specifier and Version("2.14.0") not in torch.specifier
    test = PYPROJECT["optional-dependencies"]["test"]
    assert "hypothesis" in _names(test)
    extras = {e for r in test if Requirement(r).name == "dpsim" for e in Requirement(r).extras}
    assert {"torch", "plan", "notebooks"} <= extras


def test_the_package_list_is_every_package_folder():
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "dpsim").rglob("__init__.py")}
    mapped = {name for name in SETUPTOOLS["package-dir"]}
    assert set(SETUPTOOLS["packages"]) == found | mapped
    for name, folder in SETUPTOOLS["package-dir"].items():
        assert (ROOT / folder / "__init__.py").is_file(), name


BLOCK_TORCH = r"""
import contextlib, importlib.abc, io, json, sys

TRIED = []

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            TRIED.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
from dpsim.cli import main

results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    results.append({"args": args, "status": status, "out": out.getvalue()[-300:], "err": err.getvalue(),
                    "torch_tried": bool(TRIED),
                    "loaded": sorted({m.split(".")[0] for m in sys.modules} & {"torch", "pydantic", "pandas"})})
results.append({"torch_imported": any(m == "torch" or m.startswith("torch.") for m in sys.modules)})
print(json.dumps(results))
"""

CORE = [["predict", "--gpus", "8", "--link", "nvlink"],  # first: test_predict_loads_neither_torch_nor_pydantic
        ["predict", "--gpus", "64", "--link", "ethernet"],
        ["predict", "--gpus", "8", "--link", "nvlink", "--json"],
        ["memory", "--model", "llama-2-7b", "--gpus", "16"],
        ["collective", "--gpus", "16", "--link", "infiniband", "-b", "1M", "-e", "16M", "-f", "4"],
        ["sweep", "--gpus", "8,16", "--link", "nvlink", "--model", "gpt2", "--json"],
        ["models"],
        ["calibrate", "--from-nccl-tests", "calibration/reference/nccl-tests/"
         "8x-a100-sxm-node-nvlink3-via-nvswitch.all_reduce_perf.log", "--out", "{tmp}/fitted.json", "--quiet"]]
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")
CATALOG_BY_STRATEGY = [command for s in STRATEGIES for command in (
    ["predict", "--gpus", "16", "--link", "infiniband", "--model", "gpt2", "--strategy", s, "--grad-accum", "2",
     "--activation-checkpointing", "--json"],
    ["memory", "--gpus", "16", "--strategy", s, "--json"])]
"""A catalog model's predict and memory under every data-parallel strategy (once tests/test_from_torch.py's own
process; here they share the no-torch one)."""
CORE += CATALOG_BY_STRATEGY
TORCH_ONLY = [["predict", "--model", "examples/my_model.py:build", "--input-shape", "4,128:int64", "--gpus", "8"],
              ["memory", "--model", "examples/my_model.py:build", "--input-shape", "4,128:int64"],
              ["calibrate", "--out", "{tmp}/node.json"],
              ["validate", "--emulate-hosts", "2"]]


@pytest.fixture(scope="module")
def without_torch(tmp_path_factory) -> list[dict]:
    """The commands of CORE and TORCH_ONLY, run in one process where torch cannot be imported: each
    command's result, then whether torch was imported at all."""
    tmp = tmp_path_factory.mktemp("without-torch")
    commands = [[a.replace("{tmp}", str(tmp)) for a in args] for args in CORE + TORCH_ONLY]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", BLOCK_TORCH, json.dumps(commands)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_without_torch_the_core_works_and_torch_features_name_the_extra(without_torch):
    *results, last = without_torch
    assert last == {"torch_imported": False}
    for r in results[:len(CORE)]:
        assert r["status"] == 0, r
    for r in results[len(CORE):]:
        lines = r["err"].splitlines()
        assert r["status"] == 2 and len(lines) == 1, r
        assert "pip install 'dpsim[torch]'" in lines[0] and "Traceback" not in r["err"], r


@pytest.mark.slow
def test_the_wheel_ships_every_package_preset_and_profile(tmp_path):
    # Built from a copy of the tracked files, so that no build/ or egg-info lands in the checkout.
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in filter(None, files.split("\0")):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("dpsim-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in SETUPTOOLS["packages"]:
        assert package.replace(".", "/") + "/__init__.py" in names, package
    presets = {p.name for p in (ROOT / "topologies").glob("*.yaml")}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("dpsim/topologies/")} >= presets
    profiles = {p.name for p in (ROOT / "calibration" / "profiles").glob("*.json")}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("dpsim/profiles/")} >= profiles
    metadata = next(zipfile.ZipFile(wheel).read(n).decode() for n in names if n.endswith("METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert not any(r.startswith("torch") and "extra ==" not in r for r in requires), requires


def test_predict_loads_neither_torch_nor_pydantic(without_torch):
    # Typer would import pydantic to convert flags; dpsim.cli.app converts the plain ones itself
    # (tests/benchmarks/bench_cli_startup.py prints what it saves). The no-torch process (without_torch)
    # runs this prediction first and records what it imported and any attempt at torch (which it refuses):
    # one fresh interpreter for both tests, not a second one for this command.
    first = without_torch[0]
    assert first["args"] == ["predict", "--gpus", "8", "--link", "nvlink"]
    assert first["status"] == 0 and not first["torch_tried"] and first["loaded"] == [], first


def test_catalog_predict_and_memory_never_import_torch(without_torch):
    # Run before any torch-only command: no attempt at torch so far means none of these made one.
    runs = without_torch[CORE.index(CATALOG_BY_STRATEGY[0]):][:len(CATALOG_BY_STRATEGY)]
    assert [r["args"] for r in runs] == CATALOG_BY_STRATEGY
    for r in runs:
        assert r["status"] == 0 and not r["torch_tried"] and "torch" not in r["loaded"], r


def test_shipped_data_folders_are_the_ones_pyproject_maps():
    from dpsim.shipped import CHECKOUT_FOLDERS
    assert CHECKOUT_FOLDERS == SETUPTOOLS["package-dir"]


def test_a_checkout_without_the_package_mapping_still_finds_presets_and_profiles(tmp_path):
    # As when python runs in the clone's root after a regular install: the checkout's dpsim is
    # imported, and no finder maps dpsim.topologies / dpsim.profiles.
    code = (
        "import importlib.abc, sys\n"
        "class NoMapped(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name in ('dpsim.topologies', 'dpsim.profiles'):\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, NoMapped())\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from dpsim.topology.load import preset_names, load_preset\n"
        "from dpsim.profile.io import shipped_profile_names\n"
        "assert 'ethernet' in preset_names(), preset_names()\n"
        "load_preset('ethernet')\n"
        "assert shipped_profile_names()\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
