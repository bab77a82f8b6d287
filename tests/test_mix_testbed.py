"""Two real DDP jobs sharing one shaped uplink (issue 27): ``dpsim mix`` predicts each within 10 %.

The live case (:mod:`dpsim.validate.mix`) follows the validation matrix's policy for a shared
2-core machine (``tests/test_validation.py``): a miss is measured again, once; it fails when a
run that missed had the machine to itself (outside load under :data:`run_matrix.OUTSIDE_LOAD_LIMIT`),
and is skipped with its figures when every miss ran while other processes took the cores (the
machine, not the model, was measured). The machine's change of speed (``speed_drift``) is not
judged: compute is under a tenth of these steps. A run whose rank the runtime ended with a signal
(:class:`dpsim.validate.runner.RankCrashed`; gloo aborted once in CI) is run again, once. The rest
checks the case's pieces without a testbed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from dpsim.validate.mix import HOSTS, _steady_median, check, mix_yaml
from dpsim.validate.testbed import TestbedSpec, probe_testbed

AVAILABLE, WHY = probe_testbed()

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))
from load import Load  # noqa: E402
from run_matrix import OUTSIDE_LOAD_LIMIT  # noqa: E402
import run_mix_check  # noqa: E402
from run_mix_check import BAR, CASE  # noqa: E402

def test_the_mix_file_describes_the_testbed(tmp_path):
    """The predicted cluster is the emulated one: every NIC and each rack uplink at the testbed's
    rates, each job on the servers its ranks run on, with its own profile."""
    from dpsim.mix.spec import load_mix
    from dpsim.network.tiers import TierNetwork
    from dpsim.topology import Topology, load_topology_file

    topology, mix = mix_yaml(CASE, {"mlp": "mlp.json", "transformer": "transformer.json"})
    (tmp_path / "testbed.yaml").write_text(topology)
    (tmp_path / "mix.yaml").write_text(mix)
    spec = load_mix(tmp_path / "mix.yaml")
    assert [j.nodes for j in spec.jobs] == [(0, 2), (1, 3)]
    assert dict(spec.jobs[0].predict)["calibration"] == str(tmp_path / "mlp.json")
    testbed = TestbedSpec(hosts=HOSTS, nic_bits_per_s=CASE.nic_bits_per_s, racks=2, rack_oversubscription=2.0)

    net = TierNetwork(Topology(spec=load_topology_file(spec.topology_file), n_gpus=spec.cluster_gpus))
    names = [net.link_name(i) for i in range(len(net.capacity_bytes_per_s))]
    bits = dict(zip(names, net.capacity_bytes_per_s * 8))
    nics = [v for (a, b), v in bits.items()
            if (".nic" in a and b.startswith("leaf")) or (a.startswith("leaf") and ".nic" in b)]
    uplinks = [v for (a, b), v in bits.items() if "spine" in (a, b)]
    assert len(nics) == 2 * HOSTS and len(uplinks) == 4
    assert np.allclose(nics, testbed.nic_bits_per_s)
    assert np.allclose(uplinks, testbed.uplink_bits_per_s(0))


def test_steady_steps_are_those_inside_the_common_stretch():
    ddp = {"step_starts_unix_s": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], "step_times_s": [1.0, 1.0, 1.0, 1.0, 1.0, 9.0]}
    assert _steady_median(ddp, 1.0, 5.0) == 1.0  # steps 1-4 inside; the last ends past the stretch
    from dpsim.validate.runner import ValidationError

    with pytest.raises(ValidationError, match="together_steps"):
        _steady_median(ddp, 3.5, 5.0)


def _figures(r) -> str:
    return "; ".join(f"{j.name}: alone {j.measured_alone_s * 1e3:.0f} ms measured / {j.predicted_alone_s * 1e3:.0f} "
                     f"predicted ({j.error_alone:+.1%}), together {j.measured_together_s * 1e3:.0f} / "
                     f"{j.predicted_together_s * 1e3:.0f} ({j.error_together:+.1%}), slowdown "
                     f"{j.measured_slowdown:.2f} / {j.predicted_slowdown:.2f}" for j in r.jobs)


@pytest.mark.slow
@pytest.mark.skipif(not AVAILABLE, reason=WHY)
def test_two_ddp_jobs_sharing_a_shaped_uplink_are_predicted_within_10_percent():
    from dpsim.validate.runner import RankCrashed

    misses, crashes = [], []
    while len(misses) < 2:
        with Load() as load:
            try:
                r = check(CASE)
            except RankCrashed as exc:  # the runtime, not the model: measured again, once
                if crashes:
                    pytest.fail(f"a rank crashed twice: {crashes[0]} | {exc}")
                crashes.append(str(exc))
                continue
        errors = [abs(e) for j in r.jobs for e in (j.error_alone, j.error_together)]
        # the shared uplink slows both (each job's all-reduce is most of its step)
        if r.overlap_s > 0 and max(errors) <= BAR and all(j.measured_slowdown > 1.2 for j in r.jobs):
            return
        misses.append((load.outside <= OUTSIDE_LOAD_LIMIT, f"{_figures(r)} at {load.outside:.0%} outside load"))
    if any(quiet for quiet, _ in misses):
        pytest.fail("missed the 10 % bar twice: " + " | ".join(f for _, f in misses))
    pytest.skip("missed only while other processes took the machine: " + " | ".join(f for _, f in misses))


def test_validation_section_is_what_the_recorded_run_gives():
    """VALIDATION.md's two-job section is ``dpsim mix``'s prediction of the recorded runs today: a
    model change that moves it must rewrite it (``python validation/run_mix_check.py --replay --write``)."""
    from dpsim.validate.mix import predict_runs

    record = run_mix_check.load_record()
    result = predict_runs(CASE, record["runs"])
    body = run_mix_check.section(result, when=record["when"], outside_load=record["outside_load"])
    text = run_mix_check.VALIDATION.read_text()
    assert f"{run_mix_check.HEADING}\n\n{body.strip()}\n" in text
    assert all(abs(e) <= BAR for j in result.jobs for e in (j.error_alone, j.error_together))

