"""PCIe servers without peer-to-peer (``node.p2p: false``): NCCL's SHM transport through host memory."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from dpsim.collectives.nccl import NcclCollectives
from dpsim.errors import TopologyError
from dpsim.predict import predict
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_topology_file
from dpsim.topology.server import build_server

SYSTEM = Path(__file__).resolve().parents[1] / "validation" / "systems" / "rtx4090-pcie-x4.yaml"


def _spec(**node):
    spec = load_topology_file(SYSTEM)
    return dataclasses.replace(spec, node=dataclasses.replace(spec.node, **node))


def _families(spec, a: int, b: int) -> list[str]:
    t = build_server(spec)
    return [t.links[i].family for i in t._intra[a, b] if i >= 0]


def test_p2p_off_stages_every_gpu_pair_in_host_memory():
    assert "host_mem" not in _families(_spec(), 0, 1)
    for a, b in ((0, 1), (2, 3), (3, 0)):
        assert _families(_spec(p2p=False), a, b) == ["gpu_pcie", "pcie_host", "host_mem", "mem_host",
                                                    "host_pcie", "pcie_gpu"]


def test_p2p_off_is_bound_by_host_memory_when_it_is_the_slowest_link():
    """With host memory slower than a GPU's PCIe link, SHM's write and read of every byte
    there bound the ring; with P2P the memory is never touched."""
    size = 256 * 2**20
    slow_mem = dict(host_memory_bandwidth_bytes_per_s=20e9)
    p2p = NcclCollectives(Topology.from_spec(_spec(**slow_mem), 4)).time("all_reduce", size).time_s
    shm = NcclCollectives(Topology.from_spec(_spec(p2p=False, **slow_mem), 4)).time("all_reduce", size).time_s
    assert shm > 1.5 * p2p
    fast = NcclCollectives(Topology.from_spec(_spec(p2p=False, shm_bandwidth_bytes_per_s=100e9), 4)
                           ).time("all_reduce", size).time_s
    assert fast == pytest.approx(p2p, rel=1e-9)  # the default 307 GB/s of host memory never binds a 25 GB/s ring


def _busbw(spec, gpus: int = 4, size: int = 1 << 30) -> float:
    t = NcclCollectives(Topology.from_spec(spec, gpus)).time("all_reduce", size).time_s
    return size / t * 2 * (gpus - 1) / gpus


def test_shm_runs_at_nccl_shm_rate_not_at_the_pcie_link():
    """Without P2P each GPU's kernel reads what it receives from pinned host memory: NCCL's SHM
    transport reaches 9 GB/s where a Gen3 switch path reaches 12 (NVIDIA/nccl#406), so a 1 GiB
    ring all-reduce runs at about 9 GB/s of bus bandwidth (the ramp and latency take a little),
    not at the 25 GB/s of the Gen4 links, and no faster on Gen5 links."""
    gen4 = _busbw(_spec(p2p=False))
    assert 8.0e9 < gen4 <= 9.0e9
    gen5 = _spec(p2p=False)
    gen5 = dataclasses.replace(gen5, node=dataclasses.replace(gen5.node, gpu_link_bandwidth_bytes_per_s=63e9,
                                                             pcie_bandwidth_bytes_per_s=63e9))
    assert _busbw(gen5) == pytest.approx(gen4, rel=1e-6)
    assert _busbw(_spec()) > 2.5 * gen4  # P2P: the 25 GB/s links
    assert _busbw(_spec(p2p=False, shm_bandwidth_bytes_per_s=6e9)) == pytest.approx(gen4 * 6 / 9, rel=0.02)


def test_shm_rate_key_only_without_p2p(tmp_path):
    data = yaml.safe_load(SYSTEM.read_text())
    data["node"]["shm_gbyte_per_s"] = 6
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TopologyError, match="node.shm_gbyte_per_s"):
        load_topology_file(path)
    data["node"]["p2p"] = False
    path.write_text(yaml.safe_dump(data))
    assert load_topology_file(path).node.shm_bandwidth_bytes_per_s == 6e9


def test_p2p_key_only_for_pcie_tree(tmp_path):
    data = yaml.safe_load(SYSTEM.read_text())
    data["node"]["p2p"] = False
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_topology_file(path).node.p2p is False
    data["node"]["interconnect"] = "pcie"
    for key in ("pcie_switches", "sockets"):
        del data["node"][key]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TopologyError, match="node.p2p"):
        load_topology_file(path)


def test_pcie_server_all_reduce_within_fifteen_percent_of_published_rows():
    """Four RTX 4090 on PCIe 4.0 (tests/data/pcie_collectives_reference.csv, never fitted on):
    the network's ramp, not the NVLink servers' 64 MiB one, leaves them 8-12 % slow (the
    ``node`` ramp made them 29-54 % slow)."""
    import sys

    sys.path.insert(0, str(SYSTEM.parents[1]))
    import accuracy_pcie

    from dpsim.collectives.nccl_tuning import FITTED_TUNING

    rows = [r for r in accuracy_pcie.load_rows(accuracy_pcie.DATA) if r.system == SYSTEM.stem]
    assert len(rows) >= 3
    for row in rows:
        point = accuracy_pcie.predict(row, FITTED_TUNING)
        assert abs(point.error) <= 0.15, (row.id, point.error)


def _accuracy_pcie():
    import sys

    sys.path.insert(0, str(SYSTEM.parents[1]))
    import accuracy_pcie

    return accuracy_pcie


def test_pcie_reference_rows_cite_a_loadable_system_and_no_kept_out_source():
    """Issue 26's bar needs at least two PCIe-only systems with collectives and training rows;
    every row's system is a topology file, and no row leans on a source kept out as an
    independent check (developers' guide)."""
    import csv
    import re

    from test_large_model_runs import KEPT_OUT

    acc = _accuracy_pcie()
    kept_out = KEPT_OUT + (r"nccl/issues/(812|1048|1368)\b", r"nccl#(812|1048|1368)\b",
                           r"nccl-tests(/issues/|#)(29|100|175)\b", r"run-nccltests-ubuntu")
    systems = set()
    for path, key in ((acc.DATA, "system"), (acc.TRAINING, "topology")):
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                spec = load_topology_file(acc.SYSTEMS_DIR / f"{row[key]}.yaml")
                assert spec.node.interconnect in ("pcie-tree", "pcie"), row["id"]
                for pattern in kept_out:
                    assert not re.search(pattern, row["source"], re.IGNORECASE), (row["id"], pattern)
                systems.add((path.name, row[key]))
    for name in (acc.DATA.name, acc.TRAINING.name):
        assert len({s for f, s in systems if f == name}) >= 2, name


def test_resnet_ddp_on_pcie_servers_within_eight_percent_of_lambdas_runs():
    """ResNet-50 DDP on PCIe workstations and servers (tests/data/pcie_training_reference.csv,
    Lambda's logs, never fitted on) from the measured one-GPU step: 0-4 % off each, the pairs
    without P2P (SHM through host memory at 9 GB/s) with DDP's all-reduce after backward
    (node.shm_overlaps_backward left false). (BERT-large is scored in validation/accuracy_pcie.py,
    not held here: the RTX 6000 Ada pair, one of the two pairs whose logs show the all-reduce
    hidden, is predicted 9 % slow under the rule.)"""
    acc = _accuracy_pcie()
    results = [r for r in acc.training_results(acc.rows(acc.TRAINING)) if r.row["model"] == "resnet50"]
    assert len(results) >= 10
    for r in results:
        assert abs(r.error) <= 0.08, (r.row["id"], r.error)


def test_training_step_without_p2p_never_faster_than_with_it(tmp_path):
    """Each scored PCIe training row (tests/data/pcie_training_reference.csv) on its server, and on
    the same server with the other ``node.p2p`` setting: staging every byte through host memory
    (SHM) can only lengthen the step, and strictly so for BERT-large on the pairs without P2P (0.7-1.4
    GB of gradients per step) and the RTX 6000 Ada pair (its runs set NCCL_P2P_DISABLE=1): a
    slower ring, and DDP's all-reduce after backward rather than behind it
    (dpsim.topology.spec.ddp_allreduce_after_backward)."""
    acc = _accuracy_pcie()
    checked = 0
    for row in acc.rows(acc.TRAINING):
        if row["scored"] != "yes":
            continue
        doc = yaml.safe_load((acc.SYSTEMS_DIR / f"{row['topology']}.yaml").read_text())
        p2p = doc["node"].get("p2p", True)
        flipped = {**doc, "node": {**doc["node"], "p2p": not p2p}}
        path = tmp_path / f"{row['id']}.yaml"
        path.write_text(yaml.safe_dump(flipped))
        config = acc.config_of(row)
        mine = predict(config).step_time_s
        other = predict(dataclasses.replace(config, topology_file=str(path))).step_time_s
        shm, direct = (mine, other) if not p2p else (other, mine)
        assert shm >= direct * (1 - 1e-12), (row["id"], shm, direct)
        if row["model"] == "bert-large" and not p2p:
            assert shm > direct, (row["id"], shm, direct)
        checked += 1
    assert checked >= 12


GEFORCE = SYSTEM.parent / "lambda-wrx80-geforce-x2.yaml"


def _geforce_file(tmp_path, **node) -> str:
    """The RTX 4090 pair's file (p2p false) with ``node`` keys changed (None removes one)."""
    doc = yaml.safe_load(GEFORCE.read_text())
    for key, value in node.items():
        if value is None:
            doc["node"].pop(key, None)
        else:
            doc["node"][key] = value
    path = tmp_path / f"geforce-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _bert_pair(topology_file: str, **kw):
    """PT016's job (tests/data/pcie_training_reference.csv): BERT-large fp32 on two RTX 4090s
    from the measured one-GPU step."""
    from dpsim.predict import PredictConfig

    return PredictConfig(gpus=2, topology_file=topology_file, gpu="rtx4090", model="bert-large", seq_len=384,
                         micro_batch=16, precision="fp32", optimizer="adamw", bucket_cap_mb=38.15,
                         single_gpu_step_s=16 / 46.0, **kw)


@pytest.mark.parametrize("value", ["yes", 1, 0, None, [True], "false"])
def test_shm_overlaps_backward_takes_only_true_or_false(tmp_path, value):
    path = _geforce_file(tmp_path)
    doc = yaml.safe_load(Path(path).read_text())
    doc["node"]["shm_overlaps_backward"] = value
    Path(path).write_text(yaml.safe_dump(doc))
    with pytest.raises(TopologyError) as err:
        load_topology_file(path)
    message = str(err.value)
    assert "node.shm_overlaps_backward" in message and "true|false" in message and "\n" not in message


def test_shm_overlaps_backward_only_read_without_p2p(tmp_path):
    """Like shm_gbyte_per_s: the key describes NCCL's SHM transport, so a P2P server or another
    layout refuses it rather than dropping it in silence."""
    assert load_topology_file(_geforce_file(tmp_path)).node.shm_overlaps_backward is False
    assert load_topology_file(_geforce_file(tmp_path, shm_overlaps_backward=True)).node.shm_overlaps_backward
    with pytest.raises(TopologyError, match="node.shm_overlaps_backward: only read with node.p2p: false"):
        load_topology_file(_geforce_file(tmp_path, p2p=True, shm_overlaps_backward=False))
    with pytest.raises(TopologyError, match="node.shm_overlaps_backward: only read with node.p2p: false"):
        load_topology_file(_geforce_file(tmp_path, p2p=None, shm_overlaps_backward=True))


def test_ddp_over_shm_all_reduces_after_backward_unless_the_file_says_it_overlaps(tmp_path):
    """The rule (dpsim.topology.spec.ddp_allreduce_after_backward): on a p2p-off pair DDP's step
    is the compute plus the whole all-reduce, as --no-overlap predicts it; with
    ``shm_overlaps_backward: true`` it is the overlapped step dpsim predicted before the rule."""
    from dpsim.predict import predict

    default = predict(_bert_pair(_geforce_file(tmp_path)))
    serial = predict(_bert_pair(_geforce_file(tmp_path), overlap=False))
    hidden = predict(_bert_pair(_geforce_file(tmp_path, shm_overlaps_backward=True)))
    assert default.step_time_s == serial.step_time_s
    assert default.exposed_comm_s == pytest.approx(default.comm_s, rel=1e-9)  # nothing hidden
    assert hidden.exposed_comm_s < 0.2 * hidden.comm_s  # most of it behind backward
    ddp_own = default.ddp["bucket_copies_s"] + default.ddp["host_s"]  # DDP's copies and hooks, on the GPU
    assert default.step_time_s == pytest.approx(default.compute_s + default.comm_s + ddp_own, rel=1e-9)
    assert hidden.step_time_s < default.step_time_s - 0.5 * default.comm_s
    assert "node.shm_overlaps_backward" in default.provenance.overlap.detail
    assert "shm_overlaps_backward" not in hidden.provenance.overlap.detail


def test_shm_rule_leaves_p2p_servers_and_other_strategies_alone(tmp_path):
    """The rule is inert where NCCL does not use SHM between the job's GPUs (P2P on, one GPU per
    server) and for strategies the logs do not cover: their predictions are byte-identical
    whichever ``shm_overlaps_backward`` the NodeSpec carries."""
    import json

    from dpsim.predict import predict
    from dpsim.topology.spec import ddp_allreduce_after_backward

    p2p = load_topology_file(_geforce_file(tmp_path, p2p=True))
    assert not ddp_allreduce_after_backward(p2p.node, 2)
    shm = load_topology_file(_geforce_file(tmp_path))
    assert ddp_allreduce_after_backward(shm.node, 2) and not ddp_allreduce_after_backward(shm.node, 1)
    for name in ("nvlink", "dgx-a100", "pcie"):
        from dpsim.topology.load import load_preset

        assert not ddp_allreduce_after_backward(load_preset(name).node, 8), name
    zero = _bert_pair(_geforce_file(tmp_path), strategy="zero2")
    zero_hidden = _bert_pair(_geforce_file(tmp_path, shm_overlaps_backward=True), strategy="zero2")

    def text(config) -> str:
        doc = json.dumps(predict(config).to_dict(), sort_keys=True)
        return doc.replace(config.cluster.topology_file, "FILE")  # the two temporary files' names

    assert text(zero) == text(zero_hidden)
