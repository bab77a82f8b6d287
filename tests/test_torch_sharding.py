"""Real ZeroRedundancyOptimizer and FSDP on gloo hold exactly the bytes dpsim predicts.

Two local processes (127.0.0.1, a free port, 60 s timeouts) run
``tests/torch_sharding_worker.py`` on :class:`torch_user_models.ShardingNet` (sizes that
divide neither by 2 nor by 4, so every padding rule shows) and report, per rank, the
tensors they hold. dpsim traces the same module on the meta device and predicts them:

* ZeroRedundancyOptimizer: the parameters each rank owns
  (:func:`~dpsim.strategies.zero_redundancy_optimizer_partition`) and its Adam state
  bytes (``exp_avg`` + ``exp_avg_sq`` + a 4-byte ``step`` per parameter);
* FSDP1 ``FULL_SHARD`` (CPU, ``device_id=cpu``, block auto-wrap): every flat parameter's
  shard, with ``use_orig_params=False`` (``ceil(numel/N)``) and ``True`` (16-byte
  alignment, world-size padding); dpsim's ``fsdp`` memory breakdown (fp32, Adam):
  weights = the shards' bytes and optimizer state = the moments' bytes, exactly;
* FSDP2 ``fully_shard``: the padded dim-0 shards.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from dpsim.hardware import get_gpu  # noqa: E402
from dpsim.memory import memory_breakdown  # noqa: E402
from dpsim.strategies.shards import (
    fsdp2_shard_numel,
    fsdp_shard_numel,
    torch_optimizer_state_bytes,
    wrap_units,
    zero_redundancy_optimizer_partition,
)
from dpsim.workload.from_torch import workload_from_module  # noqa: E402
from dpsim.workload.precision import get_precision  # noqa: E402

HERE = Path(__file__).parent
WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Per-rank measurements of the real run (one run for the whole module)."""
    out = tmp_path_factory.mktemp("sharding")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    last = None
    for _attempt in range(2):  # a port taken between probe and bind: retry once
        port = _free_port()
        procs = [subprocess.Popen([sys.executable, str(HERE / "torch_sharding_worker.py"), str(r), str(WORLD),
                                   str(port), str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env)
                 for r in range(WORLD)]
        results = []
        for p in procs:
            try:
                _, err = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                pytest.fail("sharding workers timed out")
            results.append((p.returncode, err))
        if all(rc == 0 for rc, _ in results):
            return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]
        last = results
    pytest.fail("sharding workers failed: " + " | ".join(err[-1500:] for _, err in last))


@pytest.fixture(scope="module")
def spec():
    import torch_user_models as user

    with torch.device("meta"):
        module = user.ShardingNet()
    return workload_from_module(module, user.sharding_net_input(), name="sharding-net")


def test_zero_redundancy_optimizer_partition_and_state_bytes(measured, spec):
    parts = zero_redundancy_optimizer_partition(spec.params, WORLD)
    for rank, m in enumerate(measured):
        assert sorted(m["zero"]["owned"]) == sorted(p.name for p in parts[rank])
        numels = [p.numel for p in parts[rank]]
        assert m["zero"]["moment_bytes"] == 2 * 4 * sum(numels)
        assert m["zero"]["moment_bytes"] + m["zero"]["step_bytes"] == torch_optimizer_state_bytes(numels, "adam")
    # every parameter has exactly one owner
    assert sorted(n for m in measured for n in m["zero"]["owned"]) == sorted(p.name for p in spec.params)


@pytest.mark.parametrize("orig", [False, True])
def test_fsdp1_flat_parameter_shards(measured, spec, orig):
    units = {u.name: u for u in wrap_units(spec, "block")}
    for m in measured:
        real = m[f"fsdp1_orig_{str(orig).lower()}"]["units"]
        assert set(real) == set(units)
        for name, unit in units.items():
            assert real[name]["fqns"][0].split(".")[-1] in {"weight", "bias"}
            predicted = fsdp_shard_numel([p.numel for p in unit.params], WORLD, align_numel=4 if orig else 0)
            assert real[name]["shard_numel"] == predicted, name
            assert real[name]["bytes"] == predicted * 4


def test_fsdp_memory_breakdown_equals_real_fsdp_tensors(measured, spec):
    mem = memory_breakdown(spec, get_gpu("h100"), precision=get_precision("fp32"), optimizer="adam",
                           micro_batch=1, strategy="fsdp", n_gpus=WORLD)
    for m in measured:
        real = m["fsdp1_orig_false"]
        assert mem.weights_bytes == sum(u["bytes"] for u in real["units"].values())
        assert mem.gradients_bytes == mem.weights_bytes  # fp32 gradient shards, same size
        assert mem.optimizer_bytes == real["adam"]["moment_bytes"]
        shards = [u["shard_numel"] for u in real["units"].values()]
        assert real["adam"]["moment_bytes"] + real["adam"]["step_bytes"] == torch_optimizer_state_bytes(shards, "adam")


def test_fsdp2_padded_shards(measured, spec):
    predicted = fsdp2_shard_numel([p.shape for p in spec.params], WORLD)
    for m in measured:
        assert m["fsdp2"]["padded_numel"] == predicted
    assert sum(m["fsdp2"]["local_numel"] for m in measured) == spec.param_count  # unpadded shards partition
    # --fsdp-version 2 holds exactly those padded fp32 shards as weights (and gradients, unsharded accumulation off)
    mem = memory_breakdown(spec, get_gpu("h100"), precision=get_precision("fp32"), optimizer="adam",
                           micro_batch=1, strategy="fsdp", n_gpus=WORLD, fsdp_version="2")
    assert mem.weights_bytes == mem.gradients_bytes == predicted * 4
