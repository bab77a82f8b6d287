"""PyTorch DDP's own costs and its communication hooks (dpsim/strategies/ddp_costs.py, comm_hooks.py).

Three kinds of evidence: invariants of the step program and of memory; golden cases
computed by hand from the roofline's formulas; and the real implementation: torch's
``_should_compress`` and ``powerSGD_hook`` (the all-reduces it issues, recorded on a gloo
process group of one rank), and real ``DistributedDataParallel``'s buckets with
``find_unused_parameters=True``.
"""

from __future__ import annotations

import math
import typing

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.memory import memory_breakdown
from dpsim.predict import PredictConfig, predict
from dpsim.predict.config import CommHook
from dpsim.strategies.build import build_step_program
from dpsim.strategies.comm_hooks import (
    COMM_HOOKS,
    bucket_hook,
    compression_ratio,
    powersgd_split,
)
from dpsim.strategies.ddp_costs import (
    DDP_FORWARD_DISPATCHES,
    DEFAULT_DDP_OPTIONS,
    DdpOptions,
    autograd_nodes,
    ddp_buckets,
    ddp_comm_buffer_bytes,
    ddp_costs,
    registration_order_buckets,
    with_dtype,
)
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import compute_profile
from dpsim.workload.precision import get_precision
from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S, MEMORY_EFFICIENCY
from dpsim.workload.spec import LayerSpec, ModelSpec, ParamSpec

H100 = get_gpu("h100")
AMP = get_precision("amp-bf16")


def _model(shapes, buffers=()) -> ModelSpec:
    layers = tuple(LayerSpec(name=f"l{i}", params=tuple(ParamSpec(name=f"l{i}.{j}", shape=s) for j, s in enumerate(ps)),
                             forward_flops_per_sample=1e9)
                   for i, ps in enumerate(shapes))
    return ModelSpec(name="toy", layers=layers, buffers=tuple(buffers))


def _program(model, options=DEFAULT_DDP_OPTIONS, *, grad_accum=1, gpu=H100, n_gpus=8, overlap=True):
    compute = compute_profile(model, gpu, micro_batch=1, precision=AMP, optimizer="adamw")
    return build_step_program("ddp", model, compute, precision=AMP, n_gpus=n_gpus, gpus_per_node=8,
                              grad_accum=grad_accum, ddp=options, gpu=gpu, overlap=overlap)


def _stream_s(size_bytes, kernels=1):
    # One roofline memory kernel (dpsim.workload.roofline.memory_term at the fitted efficiency).
    return max(size_bytes / H100.streaming_bandwidth_bytes_per_s / MEMORY_EFFICIENCY, kernels * HOST_OVERHEAD_PER_OP_S)


# ----------------------------------------------------------------- configuration


def test_comm_hook_flag_lists_the_hooks():
    assert typing.get_args(CommHook) == tuple(COMM_HOOKS)


@pytest.mark.parametrize("kwargs, flag", [
    ({"comm_hook": "powersgd", "strategy": "zero2"}, "--comm-hook"),
    ({"gradient_as_bucket_view": True, "strategy": "fsdp"}, "--gradient-as-bucket-view"),
    ({"broadcast_buffers": False, "strategy": "zero1"}, "--no-broadcast-buffers"),
    ({"powersgd_rank": 4}, "--powersgd-rank"),
    ({"powersgd_start_iter": 10, "comm_hook": "fp16-compress"}, "--powersgd-start-iter"),
    ({"comm_hook": "fp16-compress", "tp": 2, "model": "llama-2-7b"}, "--comm-hook"),
    ({"input_samples_per_s": 100.0, "tp": 2, "model": "llama-2-7b"}, "--input-samples-per-s"),
    ({"input_samples_per_s": 0.0}, "--input-samples-per-s"),
    # A loader slower than a day per step: 1e-300 samples/s printed a 4.6e+295-day step.
    ({"input_samples_per_s": 1e-300}, "--input-samples-per-s"),
    ({"input_samples_per_s": 1e-4, "micro_batch": 16}, "--input-samples-per-s"),
    ({"powersgd_start_iter": 1, "comm_hook": "powersgd"}, "--powersgd-start-iter"),
])
def test_ddp_flags_are_refused_where_they_do_not_apply(kwargs, flag):
    with pytest.raises(ConfigError) as e:
        PredictConfig(**kwargs)
    message = str(e.value)
    assert message.startswith(flag) and "\n" not in message


def test_options_default_to_torchs():
    assert PredictConfig().gradients.ddp_options() == DdpOptions()
    assert DdpOptions().is_default and not DdpOptions(static_graph=True).is_default


# ----------------------------------------------------------------- bucket copies


def test_copies_in_and_back_and_the_view_saves_the_copy_back_and_a_gradient_of_memory():
    model = _model([[(1024, 1024)], [(1024,), (4096, 1024)]])
    default = _program(model)
    view = _program(model, DdpOptions(gradient_as_bucket_view=True))
    grads = model.param_count * 4
    # In: one kernel per gradient reading it and writing the bucket; back: the same again.
    per_param = [_stream_s(2 * p.size_bytes) for p in model.params]
    assert default.framework_parts_s["bucket_copies"] == pytest.approx(2 * sum(per_param))
    assert view.framework_parts_s["bucket_copies"] == pytest.approx(sum(per_param))
    assert not any("copy back" in t.name for t in view.program.tasks)
    copy_back = [t for t in default.program.tasks if "copy back" in t.name]
    # The copies back start once every collective is done (the step's one synchronous end).
    assert copy_back and set(copy_back[0].wait_for) == set(default.gradient_ops)
    assert not any(t.wait_for for t in copy_back[1:])
    mem = lambda o: memory_breakdown(model, H100, precision=AMP, optimizer="adamw", micro_batch=1, ddp=o)
    assert mem(DdpOptions()).comm_buffers_bytes == grads
    assert mem(DdpOptions(gradient_as_bucket_view=True)).comm_buffers_bytes == 0


def test_ddp_work_is_not_part_of_the_one_gpu_step():
    base = {"gpus": 16, "link": "infiniband", "model": "gpt2"}
    plain = predict(PredictConfig(**base))
    view = predict(PredictConfig(**base, gradient_as_bucket_view=True))
    hooked = predict(PredictConfig(**base, comm_hook="fp16-compress"))
    assert plain.compute_s == pytest.approx(view.compute_s) == pytest.approx(hooked.compute_s)
    assert plain.ddp["bucket_copies_s"] > view.ddp["bucket_copies_s"] > 0
    assert plain.step_time_s >= view.step_time_s


def test_copies_run_only_in_the_synchronised_micro_batch():
    model = _model([[(512, 512)], [(512, 512)]])
    once = _program(model, grad_accum=1)
    thrice = _program(model, grad_accum=3)
    assert thrice.framework_parts_s["bucket_copies"] == pytest.approx(once.framework_parts_s["bucket_copies"])


# ----------------------------------------------------------------- hooks


def test_fp16_and_bf16_hooks_halve_fp32_bytes_and_cost_their_casts():
    params = (ParamSpec(name="w", shape=(1024, 1024)),)
    size = 1024 * 1024 * 4
    for hook in ("fp16-compress", "bf16-compress"):
        h = bucket_hook(hook, params, "float32", H100)
        assert h.comm_bytes == size / 2 and not h.blocking
        # buffer.to(16 bits) reads 4 and writes 2 bytes per element, div_ reads and writes 2,
        # decompress reads 2 and writes 4.
        assert h.stages[0].before_s == pytest.approx(_stream_s(size * 1.5) + _stream_s(size))
        assert h.after_s == pytest.approx(_stream_s(size * 1.5))
    # Gradients already in bf16: no cast, same bytes.
    h = bucket_hook("bf16-compress", (ParamSpec(name="w", shape=(1024, 1024), dtype="bfloat16"),), "bfloat16", H100)
    assert h.comm_bytes == 1024 * 1024 * 2 and h.stages[0].before_s == pytest.approx(_stream_s(size))


def test_fp16_hook_halves_the_gradient_bytes_of_a_prediction():
    base = {"gpus": 64, "link": "ethernet", "model": "gpt2-xl"}
    plain = predict(PredictConfig(**base))
    hooked = predict(PredictConfig(**base, comm_hook="fp16-compress"))
    assert hooked.gradient_bytes * 2 == plain.gradient_bytes
    assert hooked.ddp["compression_ratio"] == 2.0
    assert hooked.step_time_s < plain.step_time_s  # the lever on slow Ethernet


def test_powersgd_split_follows_should_compress():
    params = (ParamSpec(name="w", shape=(768, 3072)), ParamSpec(name="b", shape=(3072,)),
              ParamSpec(name="conv", shape=(64, 3, 7, 7)), ParamSpec(name="tiny", shape=(4, 4)))
    compressed, uncompressed = powersgd_split(params, 4)
    # (n + m) r * 2 < n m: 768x3072 yes, conv 64x147 yes, 4x4 (r=4: 32*2 >= 16) no, the vector no.
    assert compressed == [(768, 3072, 4), (64, 147, 4)]
    assert uncompressed == 3072 + 16
    before = 768 * 3072 + 3072 + 64 * 147 + 16
    assert compression_ratio(params, 4) == pytest.approx(before / (3072 + 16 + (768 + 3072) * 4 + (64 + 147) * 4))


def test_powersgd_blocks_backward_until_its_bucket_is_done():
    model = _model([[(2048, 2048), (2048,)], [(2048, 2048), (2048,)]])
    sp = _program(model, DdpOptions(comm_hook="powersgd"))
    names = [t.name for t in sp.program.tasks]
    ops = [c.name for c in sp.program.comms]
    assert all(any(f"{label}" in o for o in ops) for label in ("uncompressed", " P", " Q"))
    # After each bucket's decompress the next backward layer starts; the decompress waited for Q.
    for i, t in enumerate(sp.program.tasks):
        if t.name.endswith("decompress"):
            q = sp.program.comms[t.wait_for[-1]]
            assert q.name.endswith(" Q")
    first_decompress = names.index(next(n for n in names if n.endswith("decompress")))
    assert sp.program.tasks[first_decompress - 1].wait_for  # Q computed once P was all-reduced
    # The warm-up step (plain all-reduce) is the vanilla program with a division per bucket.
    warm = _program(model, DdpOptions(comm_hook="powersgd").warmup())
    assert [c.size_bytes for c in warm.program.comms] == [b.size_bytes for b in ddp_buckets(
        model, "float32", DdpOptions(), bucket_cap_mb=None).buckets]


def test_powersgd_memory_keeps_the_error_p_and_q():
    model = _model([[(2048, 2048), (2048,)]])
    opts = DdpOptions(comm_hook="powersgd", powersgd_rank=2)
    grads = model.param_count * 4
    pq = (2048 + 2048) * 2 * 4
    bucket = grads  # one bucket; its clone and the concatenated vector while in flight
    assert ddp_comm_buffer_bytes(model, "float32", opts, bucket_cap_mb=None) == grads + grads + pq + bucket + 2048 * 4


# ----------------------------------------------------------------- find_unused_parameters, static_graph, buffers


def test_find_unused_parameters_searches_keeps_registration_buckets_and_reduces_the_used_map():
    model = _model([[(1024, 1024)], [(1024, 1024)], [(1024,)]])
    sp = _program(model, DdpOptions(find_unused_parameters=True))
    assert any(t.name == "ddp unused-parameter search" for t in sp.program.tasks)
    used = [c for c in sp.program.comms if c.name == "used-parameter map"]
    assert len(used) == 1 and used[0].size_bytes == 4 * len(model.params)
    costs = ddp_costs(model, ddp_buckets(model, "float32", DdpOptions(find_unused_parameters=True),
                                         bucket_cap_mb=None), H100, "float32", DdpOptions(find_unused_parameters=True))
    assert costs.unused_search_s == pytest.approx(autograd_nodes(model) * 0.3e-6)
    static = _program(model, DdpOptions(find_unused_parameters=True, static_graph=True))
    assert not any("unused" in t.name for t in static.program.tasks)
    assert [c.size_bytes for c in static.program.comms] == [c.size_bytes for c in _program(model).program.comms]


def test_buffers_are_broadcast_once_per_step_before_the_forward():
    resnet = get_model("resnet50")
    assert len(resnet.buffers) == 3 * 53  # torchvision's ResNet-50 has 53 BatchNorm2d
    sp = _program(resnet, grad_accum=3)
    casts = [c for c in sp.program.comms if c.op == "broadcast"]
    assert len(casts) == 1 and casts[0].size_bytes == sum(b.size_bytes for b in resnet.buffers)
    first_forward = next(t for t in sp.program.tasks if t.kind == "forward" and not t.name.startswith("ddp"))
    waited = next(t for t in sp.program.tasks if t.name == "ddp copy buffers back")
    assert sp.program.tasks.index(waited) < sp.program.tasks.index(first_forward) and waited.wait_for
    off = _program(resnet, DdpOptions(broadcast_buffers=False))
    assert not any(c.op == "broadcast" for c in off.program.comms)
    assert not any(c.op == "broadcast" for c in _program(get_model("gpt2")).program.comms)


def test_forward_wrapper_costs_two_dispatches_per_micro_batch():
    model = _model([[(64, 64)]])
    sp = _program(model, grad_accum=2)
    assert sp.framework_parts_s["host"] == pytest.approx(2 * DDP_FORWARD_DISPATCHES * HOST_OVERHEAD_PER_OP_S)


# ----------------------------------------------------------------- input pipeline


def test_the_step_is_never_shorter_than_loading_it():
    base = {"gpus": 16, "link": "infiniband", "model": "gpt2", "micro_batch": 8}
    free = predict(PredictConfig(**base))
    slow_loader = 8 / (2 * free.step_time_s)  # loads a step in twice the step time
    bound = predict(PredictConfig(**base, input_samples_per_s=slow_loader))
    assert bound.input_bound and bound.step_time_s == pytest.approx(2 * free.step_time_s)
    assert bound.samples_per_s == pytest.approx(free.samples_per_s / 2)
    fast = predict(PredictConfig(**base, input_samples_per_s=1e6))
    assert not fast.input_bound and fast.step_time_s == free.step_time_s


# ----------------------------------------------------------------- the real implementation

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


def test_split_equals_torchs_should_compress_on_gpt2():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    for p in get_model("gpt2").params:
        n = p.shape[0]
        m = p.numel // n
        for rank in (1, 4, 32):
            r = min(n, m, rank)
            compressed, _ = powersgd_split((p,), rank)
            assert bool(compressed) == ps._should_compress(n, m, r, 2)[0], (p.name, rank)


class _Net(torch.nn.Module if torch else object):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 256)
        self.b = torch.nn.Linear(256, 128)
        self.c = torch.nn.Linear(128, 8, bias=False)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def _spec(module) -> ModelSpec:
    layers = []
    for name in ("a", "b", "c"):
        params = tuple(ParamSpec(name=f"{name}.{n}", shape=tuple(t.shape)) for n, t in getattr(module, name).named_parameters())
        layers.append(LayerSpec(name=name, params=params, forward_flops_per_sample=1.0))
    return ModelSpec(name="net", layers=tuple(layers))


@pytest.mark.slow
def test_powersgd_all_reduces_what_torchs_hook_all_reduces(process_group, monkeypatch):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    torch.manual_seed(0)
    net = _Net()
    ddp = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=100)
    state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2)
    ddp.register_comm_hook(state, ps.powerSGD_hook)
    sizes: list[list[int]] = []
    real = dist.all_reduce

    def recording(tensor, *args, **kwargs):
        sizes[-1].append(tensor.numel() * tensor.element_size())
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(ps.dist, "all_reduce", recording)
    monkeypatch.setattr(ps.default.dist, "all_reduce", recording)
    for _ in range(4):
        sizes.append([])
        ddp(torch.randn(4, 64)).sum().backward()
    spec = _spec(net)
    plan = ddp_buckets(spec, "float32", DdpOptions(), bucket_cap_mb=100)
    assert len(plan.buckets) == 1
    by_name = {p.name: p for p in spec.params}
    hook = bucket_hook("powersgd", tuple(by_name[n] for n in plan.buckets[0].param_names), "float32", H100,
                       powersgd_rank=2)
    warm = bucket_hook("allreduce", tuple(by_name[n] for n in plan.buckets[0].param_names), "float32", H100)
    assert sizes[0] == [s.size_bytes for s in warm.stages]  # before start_powerSGD_iter
    assert sizes[-1] == [s.size_bytes for s in hook.stages]


@pytest.mark.slow
def test_registration_buckets_equal_ddps_with_find_unused_parameters(process_group):
    class Wide(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Linear(16, 1024)      # registered first, used first
            self.mid = torch.nn.ModuleList(torch.nn.Linear(1024, 1024) for _ in range(8))
            self.out = torch.nn.Linear(1024, 4)

        def forward(self, x):
            x = self.emb(x)
            for m in self.mid:
                x = torch.relu(m(x))
            return self.out(x)

    net = Wide()
    ddp = torch.nn.parallel.DistributedDataParallel(net, find_unused_parameters=True)
    for _ in range(3):
        ddp(torch.randn(2, 16)).sum().backward()
    logged = ddp._get_ddp_logging_data()
    real_sizes = [int(s) for s in str(logged["bucket_sizes"]).split(", ")]
    params = [ParamSpec(name=n, shape=tuple(p.shape)) for n, p in net.named_parameters()]
    plan = registration_order_buckets(with_dtype(params, "float32"), bucket_cap_mb=None)
    assert [b.size_bytes for b in plan.buckets] == real_sizes
    assert math.isclose(sum(real_sizes), sum(p.size_bytes for p in params))
