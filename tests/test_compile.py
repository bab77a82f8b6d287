"""``--compile`` (torch.compile / Inductor, dpsim/workload/compiled.py): invariants of the fused
chains, the FP8 casts it fuses, and its one-line errors."""

from __future__ import annotations

import dataclasses

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.predict import PredictConfig, predict
from dpsim.profile.io import load_profile, save_profile
from dpsim.profile.schema import ComputeCalibration, OpRates
from dpsim.workload.catalog import get_model
from dpsim.workload.compiled import chains, fused_chain_bytes
from dpsim.workload.compute import compiled_layer_terms, compute_profile
from dpsim.workload.layers import eager_rms_norm_ops, gated_activation_ops, gelu_new_ops
from dpsim.workload.precision import get_precision
from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S, fp8_cast_terms, op_terms
from dpsim.workload.spec import MatmulOp, MemoryOp

MODELS = ["gpt2", "gpt2-xl", "llama-2-7b", "bert-large", "resnet50"]
PRECISIONS = ["amp-bf16", "bf16-params", "fp32"]


def _profiles(model, precision, fp8=None, gpu="h100", micro_batch=2):
    spec, g = get_model(model), get_gpu(gpu)
    return [compute_profile(spec, g, micro_batch=micro_batch, optimizer="adamw",
                            precision=get_precision(precision, fp8, compile=c)) for c in (False, True)]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_compiled_step_never_slower_and_gemms_unchanged(model, precision):
    eager, compiled = _profiles(model, precision)
    assert compiled.step_s <= eager.step_s
    for e, c in zip(eager.layers, compiled.layers):
        assert c.forward_s <= e.forward_s * (1 + 1e-12) and c.backward_s <= e.backward_s * (1 + 1e-12)
    for kind in ("matmul", "attention"):
        assert compiled.breakdown_s.get(kind, 0.0) == pytest.approx(eager.breakdown_s.get(kind, 0.0), rel=1e-12)
    assert compiled.breakdown_s["memory"] < eager.breakdown_s["memory"]
    assert compiled.optimizer_s == eager.optimizer_s


@pytest.mark.parametrize("model", ["llama-2-7b", "gpt2"])
def test_one_kernel_per_chain_each_way(model):
    spec, gpu = get_model(model), get_gpu("h100")
    p = get_precision("bf16-params", compile=True)
    total_eager = total_fused = 0.0
    for layer in spec.layers:
        runs = chains(layer.ops)
        terms = compiled_layer_terms(layer.ops, gpu, p, 1)
        assert len(terms) == len(runs)
        eager_kernels = sum(t.host_s for op in layer.ops for ts in op_terms(op, gpu, p, 1) for t in ts)
        fused_kernels = 0.0
        for run, (kind, fwd, bwd) in zip(runs, terms):
            if kind == "memory":
                # One launch forward, one backward.
                assert sum(t.host_s for t in fwd) <= HOST_OVERHEAD_PER_OP_S
                assert sum(t.host_s for t in bwd) <= HOST_OVERHEAD_PER_OP_S
            fused_kernels += sum(t.host_s for t in fwd + bwd)
        assert fused_kernels <= eager_kernels
        total_eager += eager_kernels
        total_fused += fused_kernels
    assert total_fused < 0.7 * total_eager


def test_traced_module_compiles_too():
    pytest.importorskip("torch")
    base = dict(gpus=8, link="nvlink", gpu="h100", model="examples/my_model.py:build", micro_batch=4)
    eager, compiled = predict(PredictConfig(**base)), predict(PredictConfig(**base, compile=True))
    assert compiled.step_time_s < eager.step_time_s


def test_fused_chain_reads_its_inputs_and_writes_its_output():
    # SwiGLU silu(gate) * up: read gate and up, write the product, whatever the eager kernels did.
    e, p = 1000.0, get_precision("bf16-params")
    chain = tuple(gated_activation_ops("act", e))
    assert fused_chain_bytes(chain, p, 3, backward=False) == pytest.approx(3 * e * 3 * 2)
    # RMSNorm under bf16 parameters: read x (twice: the statistics, then the scaling), write y;
    # the per-row statistics and the weight vector are negligible.
    tokens, dim = 512, 4096
    norm = tuple(eager_rms_norm_ops("norm", tokens, dim))
    eager = sum(n for op in norm for n, _ in op.forward)
    fused = fused_chain_bytes(norm, p, 1, backward=False) / (tokens * dim * 2)
    assert fused == pytest.approx(3.0, rel=1e-3) and fused < eager


@pytest.mark.parametrize("precision", PRECISIONS)
def test_fused_bytes_never_exceed_eager(precision):
    p = get_precision(precision)
    gpu = get_gpu("a100")
    for chain in (tuple(eager_rms_norm_ops("n", 256, 1024)), tuple(gelu_new_ops("g", 1e5)),
                  tuple(gated_activation_ops("a", 1e5))):
        for backward in (False, True):
            eager = sum(t.memory_s for op in chain for t in op_terms(op, gpu, p, 2)[backward])
            assert fused_chain_bytes(chain, p, 2, backward=backward) <= eager * gpu.streaming_bandwidth_bytes_per_s * (1 + 1e-12)


def test_gelu_new_nine_kernels_become_one():
    gpu, p = get_gpu("h100"), get_precision("amp-bf16", compile=True)
    ops = (MatmulOp(name="fc", m=1024, n=3072, k=768), *gelu_new_ops("gelu", 1024 * 3072.0),
           MatmulOp(name="proj", m=1024, n=768, k=3072))
    assert len(chains(ops)) == 3
    kinds = [k for k, _, _ in compiled_layer_terms(ops, gpu, p, 1)]
    assert kinds == ["matmul", "memory", "matmul"]


def test_compiled_fp8_drops_the_activation_amax_reads_only():
    """Rowwise scales differ between an operand's two layouts, so compiling keeps its casts apart
    and only fuses the activation's amax into the producer."""
    gpu = get_gpu("h100")
    op = MatmulOp(name="fc1", m=4096, n=11008, k=4096)
    eager = get_precision("bf16-params", "torchao-rowwise")
    compiled = get_precision("bf16-params", "torchao-rowwise", compile=True)
    ef, eb = fp8_cast_terms(op, gpu, eager, 1)
    cf, cb = fp8_cast_terms(op, gpu, compiled, 1)
    # Forward: x loses its amax read (one of its two bf16 reads); the weight keeps it.
    x_amax = 4096.0 * 4096 * 2 / gpu.streaming_bandwidth_bytes_per_s
    assert sum(t.memory_s for t in ef) - sum(t.memory_s for t in cf) == pytest.approx(x_amax)
    assert sum(t.memory_s for t in cb) < sum(t.memory_s for t in eb)
    # Delayed scaling has no amax read to fuse.
    te = get_precision("bf16-params", "te-delayed")
    assert fp8_cast_terms(op, gpu, te, 1) == fp8_cast_terms(op, gpu, get_precision("bf16-params", "te-delayed",
                                                                                     compile=True), 1)


@pytest.mark.parametrize("gathered", [False, True])
def test_compiled_tensorwise_casts_each_activation_and_gradient_once_in_both_layouts(gathered):
    """torchao tensorwise under torch.compile, as its roofline counts it: x and dy each read once
    (amax fused into the producer) by one kernel writing the row- and column-major FP8 copies the
    three GEMMs take; the weight's amax once, its forward and backward casts; a weight gathered in
    FP8 only copied column-major for the input gradient (float8_ops.preprocess_addmm)."""
    gpu = get_gpu("h100")
    m, n, k = 8192, 11008, 4096
    op = MatmulOp(name="fc1", m=m, n=n, k=k)
    kw = dict(strategy="fsdp", fsdp_version="2") if gathered else {}
    precision = get_precision("bf16-params", "torchao-tensorwise", compile=True, **kw)
    assert precision.fp8.fsdp_float8_all_gather is gathered
    f, b = fp8_cast_terms(op, gpu, precision, 1)
    bw = gpu.streaming_bandwidth_bytes_per_s
    x = dy = 2 + 2 * 1  # bytes per element: one bf16 read, two FP8 writes
    want_f = m * k * x + (0 if gathered else n * k * (2 + 2 + 1))
    want_b = m * n * dy + n * k * (1 + 1 if gathered else 2 + 1)
    assert sum(t.memory_s for t in f) * bw == pytest.approx(want_f)
    assert sum(t.memory_s for t in b) * bw == pytest.approx(want_b)
    # Kernels: x one; the weight's two-stage amax and its cast; dy one; the weight's backward one.
    assert sum(t.host_s for t in f) == pytest.approx((1 + (0 if gathered else 3)) * HOST_OVERHEAD_PER_OP_S)
    assert sum(t.host_s for t in b) == pytest.approx(2 * HOST_OVERHEAD_PER_OP_S)
    # Fewer bytes than eager's separate recasts (dy twice, x again) and than compiled rowwise.
    eager = fp8_cast_terms(op, gpu, get_precision("bf16-params", "torchao-tensorwise", **kw), 1)
    rowwise = fp8_cast_terms(op, gpu, get_precision("bf16-params", "torchao-rowwise", compile=True), 1)
    total = lambda terms: sum(t.memory_s for part in terms for t in part)  # noqa: E731
    assert total((f, b)) < total(eager) and total((f, b)) < total(rowwise)


def test_compiled_fp8_step_faster_than_eager_fp8():
    eager, compiled = _profiles("llama-2-7b", "bf16-params", fp8="torchao-tensorwise")
    assert compiled.step_s < eager.step_s


def test_golden_llama2_7b_fsdp_8_h100_compiled():
    base = dict(gpus=8, link="nvlink", gpu="h100", model="llama-2-7b", micro_batch=2, strategy="fsdp",
                precision="bf16-params")
    eager, compiled = predict(PredictConfig(**base)), predict(PredictConfig(**base, compile=True))
    # Frozen from this model (dpsim/workload/compiled.py, attention at dpsim/workload/attention_rates.py's
    # fitted FlashAttention-2 rates; compute 18.9 % slower under overlap, DEFAULT_OVERLAP_SLOWDOWN; FSDP1's
    # gradient passes, dpsim/strategies/sharded.py; 8 GPUs at MULTI_GPU_TRAINING_EFFICIENCY 0.95, dpsim/workload/
    # compute.py; the H100 at its sustained 755 TFLOP/s, dpsim.hardware.GH100_SUSTAINED_TFLOPS): 0.8286 s eager,
    # 0.7529 s compiled (0.8056 and 0.7296 at the burst 794.5; 0.7680 and 0.6958 at efficiency 1, before 2026-12-07).
    assert eager.step_time_s == pytest.approx(0.8286, rel=2e-3)
    assert compiled.step_time_s == pytest.approx(0.7529, rel=2e-3)
    assert compiled.mfu > eager.mfu
    # Compiled, each of the 32 blocks keeps 4·s·h + 2·s·inter bytes fewer per sample (micro-batch 2): the
    # min-cut partitioner recomputes the norms' tensors and SiLU's output
    # (dpsim.workload.layers.llama_compiled_saved_elements, tests/test_compiled_activations.py).
    s, h, inter = 4096, 4096, 11008
    assert eager.memory.activations_bytes - compiled.memory.activations_bytes == 2 * 32 * (4 * s * h + 2 * s * inter)
    assert eager.memory.total_bytes - compiled.memory.total_bytes == 2 * 32 * (4 * s * h + 2 * s * inter)


def test_compile_with_a_measured_step_is_a_one_line_error():
    with pytest.raises(ConfigError, match="--compile") as err:
        PredictConfig(model="gpt2", compile=True, single_gpu_step_s=0.2)
    assert "\n" not in str(err.value)


def test_compile_shown_in_config_only_when_set():
    assert "compile" not in PredictConfig(model="gpt2").to_dict()
    assert PredictConfig(model="gpt2", compile=True).to_dict()["compile"] is True


def test_compile_with_measured_eager_compute_is_a_one_line_error(tmp_path):
    base = dict(gpus=16, link="aws-p4de", model="gpt2", calibration="aws-p4de-2node")
    # A profile with no compute measurement: the roofline costs the compiled graph.
    assert predict(PredictConfig(**base, compile=True)).step_time_s < predict(PredictConfig(**base)).step_time_s
    p = load_profile("aws-p4de-2node")
    rates = OpRates(matmuls=(), attention=(), launch_s=1e-5, bandwidth_bytes_per_s=1e12)
    measured = dataclasses.replace(p, compute=dataclasses.replace(p.compute or ComputeCalibration(device="test"),
                                                                 op_rates=rates))
    path = save_profile(measured, tmp_path / "eager.json")
    with pytest.raises(ConfigError, match="--compile: profile") as err:
        predict(PredictConfig(**{**base, "calibration": str(path)}, compile=True))
    assert "\n" not in str(err.value)


def _cast_bytes(ops, precision, gpu):
    """Device-memory bytes of the FP8 cast kernels layer_terms adds for ``ops`` (micro-batch 1)."""
    from dpsim.workload.compute import layer_terms
    from dpsim.workload.spec import LayerSpec

    with_casts = layer_terms(LayerSpec(name="l", ops=ops), gpu, precision, 1)
    without = layer_terms(LayerSpec(name="l", ops=ops), gpu, dataclasses.replace(precision, fp8=None), 1)
    bw = gpu.streaming_bandwidth_bytes_per_s
    total = lambda terms: sum(t.memory_s for _, f, b in terms if _ == "memory" for t in f + b)  # noqa: E731
    return (total(with_casts) - total(without)) * bw


def test_compiled_torchao_casts_an_input_shared_by_projections_once():
    """Joint-graph CSE (torch/_functorch partitioners: fx_graph_cse before partitioning) merges the
    identical casts q/k/v (or gate/up) make of one input: separate projections then cost what one
    fused projection of the same total width costs; eager mode casts the input per linear."""
    gpu, h, m = get_gpu("h100"), 4096, 8192
    separate = (MatmulOp(name="q", m=m, n=h, k=h), MatmulOp(name="k", m=m, n=h, k=h), MatmulOp(name="v", m=m, n=h, k=h))
    fused = (MatmulOp(name="qkv", m=m, n=3 * h, k=h),)
    for recipe in ("torchao-tensorwise", "torchao-rowwise"):
        compiled = get_precision("bf16-params", recipe, compile=True)
        assert _cast_bytes(separate, compiled, gpu) == pytest.approx(_cast_bytes(fused, compiled, gpu))
        eager = get_precision("bf16-params", recipe)
        # Eager: each linear reads and casts x itself (twice more per extra linear for torchao).
        assert _cast_bytes(separate, eager, gpu) > _cast_bytes(fused, eager, gpu)
    # A linear that reads another's output (an element-wise op between them) casts its own input.
    chain = (MatmulOp(name="fc1", m=m, n=h, k=h), MemoryOp(name="act", elements=float(m * h), forward=((2, "act"),)),
             MatmulOp(name="fc2", m=m, n=h, k=h))
    tensorwise = get_precision("bf16-params", "torchao-tensorwise", compile=True)
    one = _cast_bytes(chain[:1], tensorwise, gpu)
    assert _cast_bytes(chain, tensorwise, gpu) == pytest.approx(2 * one)
    # TransformerEngine casts each module's input in eager kernels: no sharing.
    te = get_precision("bf16-params", "te-current", compile=True)
    assert _cast_bytes(separate, te, gpu) > _cast_bytes(fused, te, gpu)
