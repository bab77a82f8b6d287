"""Defects the twenty-second fuzz round found (fuzz22): a bare 0 refused as a duration without its unit though
--replace's help says "0 = at once"; a PredictConfig part of the wrong type (or an unknown setting) as a bare
TypeError; a SweepSpec built directly and never checked (a bad price left every cost null in silence); a testbed
--nic refusal naming a number the user never typed; mix and sweep files' values named in Python's spelling.

Each case says what it did before.
"""

from __future__ import annotations

import pytest

import dpsim
from dpsim.errors import DpsimError
from tests.fuzz_harness import refused
from tests.fuzz_harness import run_json as _json

_GOODPUT = ["goodput", "--model", "gpt2", "--gpus", "16", "--link", "infiniband", "--runs", "2", "--duration", "1d",
            "--json"]


# --- 1. a bare 0 as a duration --------------------------------------------------------------------------------------
def test_a_bare_zero_is_a_duration_in_any_unit(capsys):
    """Before: ``goodput --replace 0`` was refused "'0' has no unit; give one: s, min, h or d (e.g. 0h for hours, 0s
    for seconds)" though the flag's help says "(0 = at once)": zero is zero in every unit, and only other bare numbers
    are ambiguous (``--mtbf-gpu 80000``). ``--restart 0`` and ``--checkpoint-write 0`` likewise; ``--duration 0`` and
    ``--mtbf-node 0`` now reach their own rule (> 0)."""
    assert _json(_GOODPUT + ["--replace", "0"], capsys) == _json(_GOODPUT + ["--replace", "0s"], capsys)
    assert _json(_GOODPUT + ["--restart", "0"], capsys) == _json(_GOODPUT + ["--restart", "0min"], capsys)
    refused(_GOODPUT[:-3] + ["--duration", "0"], capsys, "--duration", "> 0")
    refused(_GOODPUT[:-1] + ["--mtbf-node", "0"], capsys, "--mtbf-node", "> 0")
    # Any other bare number still needs its unit.
    refused(_GOODPUT[:-1] + ["--restart", "5"], capsys, "--restart", "'5' has no unit")


# --- 2. a PredictConfig part of the wrong type, an unknown setting ----------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"parallelism": {"tp": 2}}, ("parallelism", "{'tp': 2}", "expected a ParallelismConfig", "PredictConfig(tp=2)")),
    ({"execution": "amp-bf16"}, ("execution", "'amp-bf16'", "expected an ExecutionConfig", "precision=...")),
    ({"cluster": 5}, ("cluster", "5", "expected a ClusterConfig", "gpus=...")),
    ({"micro_bach": 2}, ("'micro_bach'", "did you mean micro_batch")),
])
def test_a_part_of_the_wrong_type_or_an_unknown_setting_is_a_dpsim_error(kwargs, words):
    """Before: ``PredictConfig(parallelism={"tp": 2})`` raised a bare TypeError "parallelism must be a
    ParallelismConfig, not dict" (``execution="x"``: "must be a ExecutionConfig"), and ``micro_bach=2`` "unexpected
    setting 'micro_bach'", naming nothing to give instead: no DpsimError, so a caller catching dpsim's errors got a
    traceback. Now a DpsimError (still a TypeError, as Python's own call errors) naming the field, value and what is
    allowed."""
    with pytest.raises(DpsimError) as err:
        dpsim.PredictConfig(model="gpt2", gpus=8, **kwargs)
    assert isinstance(err.value, TypeError)
    for word in words:
        assert word in str(err.value)


# --- 3. a SweepSpec built directly ------------------------------------------------------------------------------------
_AXES = {"gpus": (8,), "model": ("gpt2",), "link": ("infiniband",)}


@pytest.mark.parametrize("kwargs, words", [
    ({"axes": "gpus"}, ("SweepSpec axes", "'gpus'", "expected a mapping")),
    ({"axes": {"gpu_count": (8,)}}, ("'gpu_count' is not a sweep axis", "micro_batch")),
    ({"axes": {"topology": ("a.yaml",)}}, ("'topology'", "'topology_file'")),
    ({"axes": {"gpus": "16"}}, ("sweep gpus", "'16'", "expected a tuple of values")),
    ({"axes": _AXES, "tokens": 1e9, "gpu_hour_usd": -5}, ("sweep gpu_hour_usd", "-5", ">= 0")),
    ({"axes": _AXES, "tokens": 1e9, "gpu_hour_usd": {"hopper": 2.0}}, ("'hopper' is not a GPU preset", "h100")),
    ({"axes": _AXES, "tokens": -5}, ("sweep tokens", "-5", ">= 1")),
])
def test_a_sweep_spec_built_directly_is_checked(kwargs, words):
    """Before: ``dpsim.SweepSpec`` (exported) checked only that no axis was empty. ``axes="gpus"`` ended in
    AttributeError "'str' object has no attribute 'items'"; an unknown axis in PredictConfig's TypeError at the first
    point; ``axes={"gpus": "16"}`` ran the points gpus=1 and gpus=6; ``gpu_hour_usd=-5`` (or an unknown GPU) left every
    row's cost_usd null in silence, and ``tokens=-5`` was refused only once each point had run. Now from_grid's rules,
    at construction."""
    from dpsim.plan.sweep import sweep_records

    with pytest.raises(DpsimError) as err:
        sweep_records(dpsim.SweepSpec(**kwargs))
    for word in words:
        assert word in str(err.value)
    # A spec of tuples, a budget and a price runs as before.
    row, = sweep_records(dpsim.SweepSpec(axes=_AXES, tokens=1e9, gpu_hour_usd={"H100": 2.0}))
    assert row["cost_usd"] is not None


# --- 4. a testbed's NIC rate ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rate, words", [
    ("200gbit", ("'200gbit'", "100kbit to 100gbit")),
    ("0bit", ("'0bit'", "100kbit to 100gbit")),
    ("9" * 400 + "bit", ("...", "100kbit to 100gbit")),
    ("1GB/s", ("'1GB/s'", "bytes per second", "8gbit")),
])
def test_a_testbed_nic_rate_out_of_range_is_named_as_given(rate, words, capsys):
    """Before: ``testbed up --nic 200gbit`` was refused "--nic: 200000000000.0 bits/s is not valid" (a number the
    user never typed), a rate past a float's range "inf bits/s", and ``1GB/s`` (bytes) "is not a rate". Every
    refusal comes before a namespace is made; none is made here."""
    line = refused(["testbed", "up", "--nic", rate], capsys, "--nic", *words)
    assert "bits/s is not valid" not in line and len(line) < 300


def test_a_testbed_nic_rate_takes_any_letter_case_and_bit_per_s():
    """Before: ``--nic 1GBIT``, ``1Gbit/s`` and ``1e9bit`` were refused "is not a rate; use e.g. 100mbit, 1gbit"
    (``1gbit`` and ``1Gb/s`` were taken). ``TestbedSpec(hosts=True, ...)`` was taken as one host, and
    ``nic_bits_per_s="1gbit"`` ended in a TypeError from math.isfinite."""
    from dpsim.validate.testbed import TestbedSpec, parse_rate_bits_per_s

    assert {parse_rate_bits_per_s(r) for r in ("1GBIT", "1Gbit/s", "1e9bit", "1gbit", "1Gb/s", "1000Mbps")} == {1e9}
    with pytest.raises(DpsimError, match="--emulate-hosts: True"):
        TestbedSpec(hosts=True, nic_bits_per_s=1e9)
    with pytest.raises(DpsimError, match="--nic: '1gbit' bits/s is not valid"):
        TestbedSpec(hosts=2, nic_bits_per_s="1gbit")


# --- 5. a mix file's times, MTBFs and bandwidths named as YAML writes them -----------------------------------------
@pytest.mark.parametrize("text, words", [
    ("  - {name: a, model: gpt2, gpus: 16}\nfailures: {repair: 1h}\ncheckpoint: {interval: no}",
     ("checkpoint.interval: false is not valid",)),
    ("  - {name: a, model: gpt2, gpus: 16, duration: yes}", ("jobs[0].duration: true is not valid",)),
    ("  - {name: a, model: gpt2, gpus: 16}\nfailures: {repair: false}", ("failures.repair: false is not valid",)),
    ("  - {name: a, model: gpt2, gpus: 16}\nfailures: {repair: 1h, mtbf_node: true}",
     ("failures.mtbf_node: true is not valid",)),
    ("  - {name: a, model: gpt2, gpus: 16}\nfailures: {repair: 1h}\nstorage: true", ("storage: true is not valid",)),
])
def test_mix_times_and_rates_are_named_as_yaml_writes_them(text, words, tmp_path, capsys):
    """Before: ``duration: yes`` was refused "jobs[0].duration: True is not valid", ``interval: no`` "False is not
    valid", likewise ``repair``, the MTBFs and ``storage``: Python's spellings, which the file does not contain
    (round 17 fixed the integer and list fields; the time, MTBF and bandwidth parsers kept ``repr``)."""
    path = tmp_path / "mix.yaml"
    path.write_text("cluster: {link: infiniband, gpus: 64}\nhorizon: 1h\njobs:\n" + text + "\n")
    line = refused(["mix", str(path)], capsys, *words)
    assert "None" not in line and "True" not in line and "False" not in line


# --- 6. a sweep file's values named as YAML writes them ---------------------------------------------------------------
@pytest.mark.parametrize("grid, words", [
    ("gpus: [true]", ("grid gpus: true is not valid", "expected an integer")),
    ("gpus: null", ("grid gpus: null is not valid", "expected an integer")),
    ("gpus: [8]\n  flash_attention: [null]", ("grid flash_attention: null is not valid", "true/false")),
])
def test_sweep_file_values_are_named_as_yaml_writes_them(grid, words, tmp_path, capsys):
    """Before: a sweep file's ``gpus: [true]`` was refused "grid gpus: True is not valid; expected an integer" and
    ``gpus: null`` "None is not valid": Python's spellings, beside the message's own YAML words ("or null",
    "true/false"), as the mix file's were (above; round 17). The API's dicts keep Python's spellings."""
    path = tmp_path / "grid.yaml"
    path.write_text(f"grid:\n  model: [gpt2]\n  link: [infiniband]\n  {grid}\n")
    line = refused(["sweep", "-c", str(path)], capsys, *words)
    assert "None" not in line and "True" not in line
    with pytest.raises(DpsimError, match="sweep gpus: True is not valid"):
        dpsim.sweep(gpus=[True], model="gpt2", link="infiniband")
