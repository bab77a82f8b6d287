"""Multi-GPU DDP throughput from a measured one-GPU step against published runs (issue 12's bar).

``tests/data/ddp_scaling_reference.csv`` holds 32 ResNet-50 DDP runs on 2-8 GPUs of one server
(Lambda's run logs, each row cited); ``validation/accuracy_ddp.py`` prints the table that
VALIDATION.md shows. Nothing is fitted on these rows, so the leave-one-system-out accuracy is
the plain one.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))

from accuracy_ddp import DATA, predict_rows, rows, summary


def test_every_row_cites_its_logs():
    data = rows(DATA)
    assert len(data) == 32 and len({r["id"] for r in data}) == 32
    for r in data:
        assert r["source"].startswith("lambdal/deeplearning-benchmark@aa5addb6a53675a649a80036dad548f1c27cbcc4 ")
        assert int(r["gpus"]) in (2, 4, 8) and float(r["samples_per_s"]) > float(r["single_gpu_samples_per_s"])


def test_multi_gpu_ddp_from_a_measured_one_gpu_step_meets_the_bar():
    results = predict_rows(rows(DATA))
    median, worst = summary(results)
    assert median <= 0.05, median
    assert worst <= 0.15, worst
    # dpsim never predicts more than linear scaling from the one-GPU step.
    assert all(r.predicted <= int(r.row["gpus"]) * float(r.row["single_gpu_samples_per_s"]) for r in results)


def test_rows_run_without_nccl_p2p_say_so():
    # Lambda's benchmark_pytorch.sh exported NCCL_P2P_DISABLE=1 from @0a684b62 (2022-10-16) to @aad0d1cd
    # (2023-02-06): every row from the older `pytorch/results/` set ran over NCCL's SHM transport, none from
    # `results_v2` did. The notes must keep saying which, and the older rows are costed on a server
    # file that says P2P is off (NCCL's SHM transport, not NVLink); the newer ones on NVLink presets.
    from accuracy_ddp import config_of

    from dpsim.predict.run import resolve_topology

    for r in rows(DATA):
        older = "pytorch/results/" in r["source"]
        assert older == ("results_v2/" not in r["source"]), r["id"]
        assert ("NCCL_P2P_DISABLE=1" in r["notes"]) == older, r["id"]
        node = resolve_topology(config_of(r)).spec.node
        assert (node.interconnect == "pcie-tree" and not node.p2p) == older, r["id"]
