"""predict --tp/--pp with a calibration profile: the layout path charges the step right after
a wait on the network exactly as the data-parallel path does (one function, same keys)."""

from __future__ import annotations

import pytest
from test_calibrate_provenance import config, cpu_profile, measured_step  # helpers only

from dpsim.predict.run import predict


def _layout(path: str, **changes):
    # Two pipeline stages on four one-rank hosts: a data-parallel pair per stage, so stage 0
    # waits on the network for its gradients.
    return config(path, gpus=4, pp=2, global_batch=8, **changes)


def test_the_layout_step_moves_by_exactly_the_after_wait_charge(tmp_path):
    base = predict(_layout(cpu_profile(tmp_path, step=measured_step(), name="plain")))
    assert base.layout is not None and base.provenance.after_comm is None
    assert "after_comm" not in base.provenance.to_dict()
    assert base.exposed_comm_s > 0.05  # bert-base's gradients over 120 MB/s: mostly exposed
    extra_s = 0.004
    for wait_s, share in ((base.exposed_comm_s, 1.0), (2 * base.exposed_comm_s, 0.5)):
        step = measured_step(after_comm_extra_s=extra_s, after_comm_wait_s=wait_s)
        p = predict(_layout(cpu_profile(tmp_path, step=step, name=f"w{share}")))
        assert p.step_time_s == pytest.approx(base.step_time_s + extra_s * share, rel=1e-9)
        assert p.simulation.steps[0].step_time_s == pytest.approx(p.step_time_s, rel=1e-12)
        assert p.samples_per_s == pytest.approx(8 / p.step_time_s, rel=1e-12)
        assert p.compute_s == pytest.approx(base.compute_s)  # one GPU waits on nothing
        assert p.exposed_comm_s == pytest.approx(base.exposed_comm_s)
        after = p.provenance.to_dict()["after_comm"]
        assert after == pytest.approx({"extra_s": extra_s, "wait_s": wait_s, "charged_s": extra_s * share})
        assert "right after waiting on the network" in p.provenance.compute.detail
    # Measured faster within noise: never a credit.
    neg = measured_step(after_comm_extra_s=-0.002, after_comm_wait_s=0.2)
    assert predict(_layout(cpu_profile(tmp_path, step=neg, name="neg"))).step_time_s == pytest.approx(
        base.step_time_s, rel=1e-9)


def test_a_layout_without_network_waits_is_charged_nothing(tmp_path):
    # pp = 2 on two hosts, dp = 1: no gradient all-reduce, so nothing exposed, nothing charged.
    step = measured_step(after_comm_extra_s=0.004, after_comm_wait_s=0.01)
    p = predict(config(cpu_profile(tmp_path, step=step, name="pp"), pp=2, global_batch=8))
    plain = predict(config(cpu_profile(tmp_path, step=measured_step(), name="pp0"), pp=2, global_batch=8))
    assert p.exposed_comm_s == 0.0 and p.provenance.after_comm.charged_s == 0.0
    assert p.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)
