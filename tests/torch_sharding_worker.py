"""One rank of the real sharding checks (run by tests/test_torch_sharding.py).

``python tests/torch_sharding_worker.py RANK WORLD PORT OUT_DIR`` joins a gloo group on
127.0.0.1 and, on :class:`torch_user_models.ShardingNet`, measures per rank:

* ``torch.distributed.optim.ZeroRedundancyOptimizer`` (Adam): which parameters the rank
  owns and the bytes of its optimizer state after one step;
* FSDP1 ``FULL_SHARD`` with a ``ModuleWrapPolicy({Block})`` on CPU (``device_id=cpu``),
  ``use_orig_params`` False and True: each flat parameter's shard, and the Adam state;
* FSDP2 ``fully_shard`` per block and on the root: each parameter's padded local shard.

It writes ``OUT_DIR/rank{RANK}.json``. Everything is measured from the tensors.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path


def _tensor_bytes(t) -> int:
    if hasattr(t, "to_local"):
        t = t.to_local()
    return t.numel() * t.element_size()


def _adam_state(opt, names_by_id):
    moments, steps, owned = 0, 0, []
    for p, state in opt.state.items():
        for key, t in state.items():
            if key == "step":
                steps += _tensor_bytes(t)
            else:
                moments += _tensor_bytes(t)
        owned.append(names_by_id.get(id(p)))
    return {"moment_bytes": moments, "step_bytes": steps, "n_state_tensors": len(opt.state), "owned": owned}


def main(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from torch.distributed.optim import ZeroRedundancyOptimizer

    sys.path.insert(0, str(Path(__file__).parent))
    from torch_user_models import Block, ShardingNet

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    result: dict = {"rank": rank, "world": world}
    x = torch.randn(4, 7)

    # ZeroRedundancyOptimizer over plain replicas.
    torch.manual_seed(0)
    model = ShardingNet()
    names = {id(p): n for n, p in model.named_parameters()}
    zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    model(x).sum().backward()
    zero.step()
    result["zero"] = _adam_state(zero.optim, names)

    # FSDP1 FULL_SHARD, one flat parameter per block plus the root's.
    for orig in (False, True):
        torch.manual_seed(0)
        fsdp = FSDP(ShardingNet(), auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=torch.device("cpu"),
                    sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=orig)
        units = {}
        for name, m in fsdp.named_modules():
            if not isinstance(m, FSDP) or m._handle is None:
                continue
            flat = m._handle.flat_param
            key = name.replace("_fsdp_wrapped_module.", "").replace("_fsdp_wrapped_module", "") or "(root)"
            units[key] = {"shard_numel": flat.numel(), "bytes": _tensor_bytes(flat), "fqns": list(flat._fqns)}
        entry = {"units": units}
        if not orig:
            opt = torch.optim.Adam(fsdp.parameters(), lr=1e-3)
            fsdp(x).sum().backward()
            opt.step()
            entry["adam"] = _adam_state(opt, {})
        result[f"fsdp1_orig_{str(orig).lower()}"] = entry

    # FSDP2 fully_shard.
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = ShardingNet()
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    padded = 0
    for mod in [model, *model.blocks]:
        group = mod._get_fsdp_state()._fsdp_param_group
        if group is not None:
            padded += sum(fp._sharded_param_data.numel() for fp in group.fsdp_params)
    result["fsdp2"] = {"padded_numel": padded,
                       "local_numel": sum(p.to_local().numel() for p in model.parameters())}

    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
