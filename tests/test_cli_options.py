"""The commands' config flags come from PredictConfig's fields, so their help cannot drift.

``predict``, ``memory``, ``report`` and ``goodput`` take their shared flags from
:mod:`dpsim.cli.options`: each such flag is spelled after its field, its help is the
field's docstring and a ``Literal`` field lists its choices; ``sweep``'s list flags say
"Comma-separated values of:" the same help.
"""

from __future__ import annotations

import importlib
import json
import typing

import pytest
import typer

from dpsim.cli import app, main
from dpsim.cli.goodput import GOODPUT_FIELDS
from dpsim.cli.memory import MEMORY_FIELDS
from dpsim.cli.options import ALL_FIELDS, field_docs
from dpsim.cli.plan import SWEEP_FIELDS
from dpsim.cli.predict import PREDICT_FIELDS
from dpsim.predict.config import SETTINGS, Precision, PredictConfig, field_kind, flag_name, range_help, setting_field

CONFIG_COMMANDS = {"predict": PREDICT_FIELDS, "memory": MEMORY_FIELDS, "report": PREDICT_FIELDS,
                   "goodput": GOODPUT_FIELDS}


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")


def click_command(name: str):
    return typer.main.get_command(app).commands[name]


def options(name: str) -> dict[str, object]:
    return {p.name: p for p in click_command(name).params}


def test_every_field_has_a_docstring_rich_prints_verbatim():
    docs = field_docs()
    assert set(docs) == set(ALL_FIELDS)
    for name, doc in docs.items():
        assert doc and "[" not in doc and "]" not in doc, (name, doc)  # rich would read [..] as markup


def test_field_docs_read_from_the_classes_alone_are_the_whole_modules(monkeypatch):
    """field_docs parses only the parts' classes (start-up time); the whole module gives the same docs,
    and a class cut inside a string falls back to the whole module."""
    import ast

    import dpsim.cli.options as options_mod

    sliced = field_docs()
    whole, class_sources = ast.parse, options_mod._class_sources
    monkeypatch.setattr(options_mod, "_class_sources", lambda text, names: whole(text))
    field_docs.cache_clear()
    try:
        assert options_mod.field_docs() == sliced
    finally:
        field_docs.cache_clear()
    text = 'class A:\n    x: int = 1\n    """The x,\nof A."""\n\n\nclass B:\n    y: int = 2\n'
    assert ast.dump(class_sources(text, {"A"})) == ast.dump(ast.parse(text))
    assert ast.dump(class_sources(text, {"B"})) == ast.dump(ast.parse(text[text.index("class B"):]))


@pytest.mark.parametrize("command", sorted(CONFIG_COMMANDS))
def test_config_flags_have_the_fields_docstring_as_help(command):
    params = options(command)
    fields = CONFIG_COMMANDS[command]
    for name in fields:
        param = params[name]
        assert param.help.startswith(field_docs()[name]), (command, name)
        allowed = range_help(name)  # every count and number says its range (dpsim/limits.py)
        assert (allowed is None or param.help.endswith(f" Allowed: {allowed}.")), (command, name)
        assert allowed is not None or field_kind(name)[0] in (str, bool), (command, name)
        flag = flag_name(name)
        assert param.opts == [flag], (command, name, param.opts)
        if field_kind(name)[0] is bool:
            assert param.secondary_opts == ["--no-" + flag.removeprefix("--")], (command, name)


@pytest.mark.parametrize("command", sorted(CONFIG_COMMANDS))
def test_no_command_redeclares_a_field_flag_by_hand(command):
    flags = {flag_name(name): name for name in ALL_FIELDS}
    exposed = set()
    for param in click_command(command).params:
        for opt in [*param.opts, *getattr(param, "secondary_opts", [])]:
            if opt in flags:
                assert param.name == flags[opt], (command, opt, param.name)
                exposed.add(param.name)
    assert exposed == set(CONFIG_COMMANDS[command])


def test_commands_expose_the_fields_they_use():
    assert set(PREDICT_FIELDS) == set(SETTINGS)
    # memory reports predict's memory section for the same job: every field (tests/test_cli_parity.py).
    assert set(MEMORY_FIELDS) == set(ALL_FIELDS)
    # goodput multiplies predict's step: every field that sets it (tests/test_cli_parity.py).
    assert set(GOODPUT_FIELDS) == set(ALL_FIELDS)


@pytest.mark.parametrize("command", sorted(CONFIG_COMMANDS))
def test_field_defaults_are_the_flags_defaults(command):
    defaults = PredictConfig().settings()
    for name in CONFIG_COMMANDS[command]:
        param = options(command)[name]
        scale = setting_field(name).metadata.get("flag_scale")
        expected = defaults[name] if defaults[name] is None or scale is None else defaults[name] * scale
        if name == "link":
            # None: not given, resolved by the library (ethernet, or no preset with a --topology file), so
            # that --link given with --topology is refused rather than dropped.
            expected = None
        assert param.default == expected, (command, name)


@pytest.mark.parametrize("command", sorted(CONFIG_COMMANDS))
def test_help_lists_every_precision(capsys, command):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--precision" in out
    for precision in typing.get_args(Precision):
        assert precision in out, (command, precision)
    assert "fp16-mixed" in out


def test_sweep_list_flags_say_comma_separated_field_help():
    params = options("sweep")
    for name in SWEEP_FIELDS:
        param = params[name]
        assert param.opts == [flag_name(name)], name
        assert param.help.startswith("Comma-separated values of: " + field_docs()[name]), name


def test_memory_refuses_an_unknown_flag(capsys):
    # memory takes every predict field (--steps included, ignored as predict's memory section ignores
    # it); a flag no command defines is refused in one line.
    assert main(["memory", "--no-such-flag", "3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpsim: error: ") and "--no-such-flag" in err


# ------------------------------------------------------------------ flags -> config

def predict_config(capsys, *args: str) -> dict:
    assert main(["predict", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["config"]


def test_flags_in_human_units_and_old_spellings_reach_the_config(capsys):
    # No --link with the --topology file: the pair is refused (the file describes the cluster), and the
    # config names no preset.
    config = predict_config(capsys, "--gpus", "16", "--model", "gpt2", "--single-gpu-step-ms",
                            "180", "--no-overlap", "--no-flash-attention", "--activation-checkpointing",
                            "--topology", "topologies/examples/nvl72-ib.yaml", "--gpus-per-node", "8")
    assert config == {**PredictConfig().to_dict(), "gpus": 16, "link": None, "model": "gpt2",
                      "single_gpu_step_s": 0.18, "overlap": False, "flash_attention": False,
                      "activation_checkpointing": True, "topology_file": "topologies/examples/nvl72-ib.yaml",
                      "gpus_per_node": 8}


def test_single_gpu_throughput_is_converted_with_the_micro_batch(capsys):
    config = predict_config(capsys, "--gpus", "8", "--model", "gpt2", "--micro-batch", "6",
                            "--single-gpu-samples-per-s", "30")
    assert config["single_gpu_step_s"] == 6 / 30


def test_calibration_sets_the_overlap_slowdown_unless_given(capsys, monkeypatch):
    # The shipped profiles measured no slowdown: stand in for one that did (the library's rule,
    # dpsim.predict.resolve, which the CLI goes through; tests/test_api.py uses a real profile).
    monkeypatch.setattr(importlib.import_module("dpsim.predict.resolve"), "calibrated_overlap_slowdown",
                        lambda profile: 0.25)
    args = ("--gpus", "16", "--link", "aws-p4de", "--calibration", "aws-p4de-2node", "--noise-cv", "0")
    assert predict_config(capsys, *args)["overlap_slowdown"] == 0.25
    # Given, even at the field's default, the flag wins.
    assert predict_config(capsys, *args, "--overlap-slowdown", "0.1")["overlap_slowdown"] == 0.1
    assert predict_config(capsys, "--gpus", "16", "--link", "aws-p4de")["overlap_slowdown"] == 0.189


@pytest.mark.parametrize("command, args, needles", [
    ("predict", ["--strategy", "zero3", "--bucket-cap-mb", "25"], ["--bucket-cap-mb: 25.0", "zero3", "--fsdp-unit"]),
    ("predict", ["--input-shape", "8,1024"], ["--input-shape: applies only to a torch module", "'8,1024'"]),
    ("predict", ["--strategy", "zero4"], ["--strategy: 'zero4'", "fsdp-hybrid"]),
    ("predict", ["--fsdp-unit", "tile"], ["--fsdp-unit: 'tile'", "block"]),
    ("predict", ["--grad-accum", "0"], ["--grad-accum: 0", ">= 1"]),
    ("predict", ["--jobs", "0"], ["--jobs: 0", ">= 1"]),
    ("predict", ["--placement", "random"], ["--placement: 'random'", "interleaved"]),
    ("predict", ["--compute-efficiency", "1.5"], ["--compute-efficiency: 1.5", ">= 0.01 and <= 1"]),
    ("predict", ["--algo", "foo"], ["--algo: 'foo'", "ring"]),
    ("predict", ["--single-gpu-samples-per-s", "0"], ["--single-gpu-samples-per-s: 0", "> 0"]),
    ("memory", ["--micro-batch", "0"], ["--micro-batch: 0", ">= 1"]),
    ("memory", ["--precision", "fp8"], ["--precision: 'fp8'", "fp16-mixed"]),
    ("goodput", ["--precision", "fp8"], ["--precision: 'fp8'", "fp16-mixed"]),
    ("goodput", ["--micro-batch", "0"], ["--micro-batch: 0", ">= 1"]),
    ("report", ["--gpus", "0"], ["--gpus: 0", ">= 1"]),
])
def test_config_errors_are_one_line_from_every_command(capsys, tmp_path, command, args, needles):
    extra = ["-o", str(tmp_path / "r.html")] if command == "report" else []
    assert main([command, *args, *extra]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("dpsim: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
