"""predict with a profile: models matched by what they are, a CPU profile predicting a CPU cluster,
and every number saying where it came from (table and ``--json``'s ``provenance``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dpsim.cli import main
from dpsim.errors import ConfigError, ProfileError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.profile.io import save_profile
from dpsim.profile.match import match_model_step, model_fingerprint
from dpsim.profile.schema import ComputeCalibration, LayerTiming, Measurement, ModelStep, Profile, make_op_calibration
from dpsim.workload.catalog import get_model

MODEL = "bert-base"
MB = 2


def _sweep(n: int, busbw: float = 120e6, a: float = 500e-6, top: int = 26) -> list[Measurement]:
    sizes = [2.0**k for k in range(12, top)]
    return [Measurement(size_bytes=s, time_s=a + 2 * (n - 1) / n * s / busbw, repeats=10, mean_s=a + s / busbw,
                        ci_low_s=(a + s / busbw) * 0.99, ci_high_s=(a + s / busbw) * 1.01) for s in sizes]


def cpu_profile(tmp_path, *, step: ModelStep | None = None, comm_slowdown: float = 0.2, top: int = 26,
                name: str = "cpu") -> str:
    """A profile as ``dpsim calibrate`` writes it on 2 CPU hosts (one rank each)."""
    ops = {("inter_node", "all_reduce"): make_op_calibration("all_reduce", "inter_node", 2, _sweep(2, top=top))}
    compute = ComputeCalibration(device="Test CPU", matmul_flops_per_s={"float32": 50e9},
                                 memory_bandwidth_bytes_per_s=20e9, overlap_slowdown=0.05,
                                 comm_slowdown=comm_slowdown, model_step=step)
    profile = Profile(name=name, environment={"backend": "gloo", "device_type": "cpu", "device_memory_bytes": 16e9,
                                              "ranks_per_node": [1, 1], "hosts": 2},
                      link_classes={"inter_node": {"n_ranks": 2, "n_nodes": 2}}, ops=ops, compute=compute)
    return str(save_profile(profile, tmp_path / f"{name}.json"))


def measured_step(**changes) -> ModelStep:
    spec = get_model(MODEL, flash_attention=True)
    layers = tuple(LayerTiming(name=l.name, forward_s=1e-3, backward_s=2e-3) for l in spec.layers)
    base = dict(model="some/where/else:bert", micro_batch=MB, dtype="float32", forward_s=1e-3 * len(layers),
                backward_s=2e-3 * len(layers), layers=layers, layers_traced=True,
                structure_hash=model_fingerprint(spec), forward_flops_per_sample=spec.forward_flops_per_sample,
                optimizer="optimizer()", optimizer_s=0.004, loss="loss()", step_time_cv=0.01)
    base.update(changes)
    return ModelStep(**base)


def config(path: str, **changes) -> PredictConfig:
    base = dict(gpus=2, gpus_per_node=1, link="ethernet", model=MODEL, micro_batch=MB, precision="fp32",
                calibration=path, steps=2)
    base.update(changes)
    return PredictConfig(**base)


def run_cli(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_fingerprint_is_the_structure_not_the_name():
    a = get_model(MODEL, flash_attention=True)
    assert model_fingerprint(a) == model_fingerprint(replace(a, name="another spelling"))
    assert model_fingerprint(a) != model_fingerprint(get_model("bert-large", flash_attention=True))


def test_measured_step_is_used_layer_by_layer_with_its_optimizer(tmp_path):
    step = measured_step()
    p = predict(config(cpu_profile(tmp_path, step=step)))
    assert p.compute_s == pytest.approx(step.forward_s + step.backward_s + step.optimizer_s, rel=1e-6)
    # DDP's bucket copies (fp32 gradients in and back, read + write) at the measured 20 GB/s
    assert p.ddp["bucket_copies_s"] >= 4 * 4 * p.param_count / 20e9
    assert p.optimizer_s == pytest.approx(0.004)
    prov = p.provenance.to_dict()
    assert prov["compute"]["source"] == "profile" and "per traced layer" in prov["compute"]["detail"]
    assert "optimizer measured" in prov["compute"]["detail"] and "loss loss()" in prov["compute"]["detail"]
    assert prov["network"]["source"] == "profile" and "inter_node" in prov["network"]["detail"]
    assert "collectives 20.0 % slower while compute runs" in prov["overlap"]["detail"]
    assert prov["device"]["source"] == "profile"


@pytest.mark.parametrize("changes, reason", [
    ({"micro_batch": 4}, "micro-batch 2, not 4"),
    ({"model": "bert-large"}, "another model"),
    ({"seq_len": 64}, "on other inputs"),
])
def test_another_model_or_batch_is_modelled_and_says_why(tmp_path, changes, reason):
    p = predict(config(cpu_profile(tmp_path, step=measured_step()), **changes))
    prov = p.provenance.to_dict()
    assert prov["compute"]["source"] == "model" and reason in prov["compute"]["detail"]
    assert any(reason in w for w in prov["warnings"])


def test_profiles_without_fingerprints_match_by_the_model_string(tmp_path):
    step = measured_step(structure_hash=None, forward_flops_per_sample=None, model=MODEL)
    assert match_model_step(Profile(name="x", compute=ComputeCalibration(device="c", model_step=step)),
                            get_model(MODEL), micro_batch=MB, dtype="float32", config_model=MODEL).step is step


def test_a_cpu_profile_predicts_a_cpu_cluster(tmp_path, capsys):
    path = cpu_profile(tmp_path, step=measured_step())
    p = predict(config(path))
    assert p.gpu == "cpu" and p.mfu is None
    assert p.memory.capacity_bytes == pytest.approx(16e9)  # the host's, one rank per host
    with pytest.raises(ConfigError, match="--precision: .* use --precision fp32"):
        predict(config(path, precision="bf16-mixed"))
    # the CLI takes fp32 and the ranks per node from the profile, and says where each number came from
    rc, out, err = run_cli(capsys, "predict", "--calibration", path, "--gpus", "2", "--model", MODEL,
                           "--micro-batch", str(MB), "--noise-cv", "0", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["config"]["precision"] == "fp32" and d["config"]["gpus_per_node"] == 1 and d["gpu"] == "cpu"
    assert d["mfu"] is None and set(d["provenance"]) == {"compute", "network", "overlap", "device", "warnings",
                                                          "transport_sensitivity"}
    rc, out, err = run_cli(capsys, "predict", "--calibration", path, "--gpus", "2", "--model", MODEL,
                           "--micro-batch", str(MB), "--noise-cv", "0")
    assert rc == 0 and "where the numbers come from" in out and "CPU ranks" in out and "h100" not in out.lower()
    assert "-0.0 %" not in out


def test_sizes_beyond_the_measured_sweep_and_noisy_steps_are_warned(tmp_path):
    path = cpu_profile(tmp_path, step=measured_step(step_time_cv=0.2), top=20)  # sweep up to 512 KiB
    warnings = predict(config(path)).provenance.warnings
    assert any("larger than the profile measured" in w and "-e" in w for w in warnings)
    assert any("varied by 20 %" in w for w in warnings)


def test_gpus_without_a_matching_layout_suggest_the_profiles(tmp_path):
    path = cpu_profile(tmp_path, step=measured_step())
    with pytest.raises(ProfileError, match="use --gpus-per-node 1"):
        predict(config(path, gpus=2, gpus_per_node=2))
    # Left out, GPUs per node are the profile's (one rank per host), from the API as from the CLI,
    # not the ethernet preset's 8 (one node, which the profile cannot cost).
    p = predict(config(path, gpus=4, gpus_per_node=None))
    assert (p.config.cluster.gpus_per_node, p.n_nodes) == (1, 4)


def test_presets_say_they_are_models(capsys):
    rc, out, err = run_cli(capsys, "predict", "--gpus", "16", "--link", "infiniband", "--json")
    prov = json.loads(out)["provenance"]
    assert prov["compute"]["source"] == "model" and prov["network"]["source"] == "model"
    assert prov["overlap"]["source"] == "model" and "default estimate" in prov["overlap"]["detail"]
    rc, out, err = run_cli(capsys, "predict", "--gpus", "16", "--link", "infiniband", "--overlap-slowdown", "0.2",
                           "--single-gpu-step-ms", "100", "--json")
    prov = json.loads(out)["provenance"]
    assert prov["compute"]["source"] == "flag" and prov["overlap"]["source"] == "flag"


def test_variability_replays_the_slowed_collectives(tmp_path):
    from dpsim.variability.run import predict_with_variability
    from dpsim.variability.spec import VariabilitySpec

    cfg = config(cpu_profile(tmp_path, step=measured_step(), comm_slowdown=0.5))
    plain = predict(cfg)
    _, report = predict_with_variability(cfg, VariabilitySpec(noise_cv=1e-9, samples=2), steps=5)
    assert report.statistics.mean_s == pytest.approx(plain.step_time_s, rel=1e-4)


def test_the_step_after_waiting_on_the_network_is_charged_by_the_wait(tmp_path):
    # Without the measurement: nothing charged, no key in the JSON.
    base = predict(config(cpu_profile(tmp_path, step=measured_step(), name="plain")))
    assert base.provenance.after_comm is None and "after_comm" not in base.provenance.to_dict()
    assert base.exposed_comm_s > 0.05  # bert-base's gradients over 120 MB/s: mostly exposed
    extra_s = 0.004
    # A wait as long as the step's exposed communication: all of it; twice as long: half.
    for wait_s, share in ((base.exposed_comm_s, 1.0), (2 * base.exposed_comm_s, 0.5), (base.exposed_comm_s / 3, 1.0)):
        step = measured_step(after_comm_extra_s=extra_s, after_comm_wait_s=wait_s)
        p = predict(config(cpu_profile(tmp_path, step=step, name=f"w{share}")))
        assert p.step_time_s == pytest.approx(base.step_time_s + extra_s * share, rel=1e-9)
        assert p.compute_s == pytest.approx(base.compute_s)  # one GPU waits on nothing
        after = p.provenance.to_dict()["after_comm"]
        assert after == pytest.approx({"extra_s": extra_s, "wait_s": wait_s, "charged_s": extra_s * share})
        assert "right after waiting on the network" in p.provenance.compute.detail
    # Measured faster within noise: never a credit.
    p = predict(config(cpu_profile(tmp_path, step=measured_step(after_comm_extra_s=-0.002, after_comm_wait_s=0.2),
                                   name="neg")))
    assert p.step_time_s == pytest.approx(base.step_time_s, rel=1e-9)
    # One GPU: no network to wait on, nothing charged.
    one = predict(config(cpu_profile(tmp_path, step=measured_step(after_comm_extra_s=extra_s, after_comm_wait_s=0.2),
                                     name="one"), gpus=1))
    assert one.provenance.after_comm is None


def test_the_variability_replay_adds_the_same_after_wait_charge(tmp_path):
    from dpsim.variability.run import predict_with_variability
    from dpsim.variability.spec import VariabilitySpec

    step = measured_step(after_comm_extra_s=0.004, after_comm_wait_s=0.01)  # a short wait: all of it
    cfg = config(cpu_profile(tmp_path, step=step, name="var"))
    p, report = predict_with_variability(cfg, VariabilitySpec(noise_cv=1e-9, samples=2), steps=5)
    assert p.provenance.after_comm.charged_s == pytest.approx(0.004)
    assert report.statistics.mean_s == pytest.approx(p.step_time_s, rel=1e-4)
