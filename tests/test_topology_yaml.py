"""Topology YAML: presets, user files, strict validation, and graph invariants."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import networkx as nx
import pytest
import yaml

import dpsim.topology.cluster as cluster_mod
import dpsim.topology.load as load_mod
from dpsim.cli import main
from dpsim.errors import DpsimError, TopologyError
from dpsim.topology.cluster import Topology
from dpsim.topology.graph import Reach, build_graph, gpu_id
from dpsim.topology.load import (
    load_preset,
    load_topology_file,
    preset_names,
    spec_from_dict,
)
from dpsim.topology.spec import FABRIC_KINDS, INTRA_NODE_KINDS, TopologySpec

REPO = Path(__file__).resolve().parents[1]
PRESETS = ("ethernet", "infiniband", "nvlink", "pcie")


def preset_dict(name: str) -> dict:
    return yaml.safe_load((REPO / "topologies" / f"{name}.yaml").read_text())


def write_yaml(tmp_path: Path, data, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def kinds(g: nx.DiGraph, kind: str) -> list[str]:
    return [v for v, d in g.nodes(data=True) if d["kind"] == kind]


# ----------------------------------------------------------------------------- presets

def test_preset_names():
    assert set(PRESETS) <= set(preset_names())
    assert sorted(p.stem for p in (REPO / "topologies").glob("*.yaml")) == preset_names()


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_and_cites_sources(name):
    spec = load_preset(name)
    assert isinstance(spec, TopologySpec)
    assert spec.name == name and spec.description
    assert spec.sources and all(s.strip() for s in spec.sources)
    assert spec.node.interconnect in INTRA_NODE_KINDS
    assert spec.fabric is None or spec.fabric.kind in FABRIC_KINDS
    # The file in topologies/ and the packaged resource are the same document.
    assert spec_from_dict(preset_dict(name), origin=name) == spec
    Topology.from_spec(spec, 4 * spec.node.gpus_per_node).check_connected()


def test_preset_units_are_converted_to_si():
    ib = load_preset("infiniband")
    assert ib.fabric.nic_bandwidth_bytes_per_s == pytest.approx(400e9 / 8)  # 400 Gb/s
    assert ib.node.gpu_link_bandwidth_bytes_per_s == pytest.approx(450e9)  # 450 GB/s
    assert ib.fabric.nic_latency_s == pytest.approx(9.6e-6)
    # No launch_overhead_us in the file: the fitted per-call default applies (NcclTuning).
    assert ib.launch_overhead_s is None


def test_defaults_for_optional_keys():
    data = preset_dict("ethernet")
    for key in ("nics_per_node", "nodes_per_leaf", "oversubscription", "rail_optimized"):
        del data["fabric"][key]
    del data["description"], data["sources"]
    spec = spec_from_dict(data)
    assert spec.fabric.nics_per_node == 1
    assert spec.fabric.nodes_per_leaf == 32
    assert spec.fabric.oversubscription == 1.0
    assert spec.fabric.rail_optimized is False
    assert spec.description == "" and spec.sources == () and spec.launch_overhead_s is None


# ----------------------------------------------------------------------------- user files

def test_user_yaml_loads_via_cli(tmp_path, capsys):
    data = preset_dict("infiniband")
    data["name"] = "my-cluster"
    data["node"]["gpus_per_node"] = 4
    data["fabric"]["nics_per_node"] = 4
    data["fabric"]["nic_gbit_per_s"] = 200
    path = write_yaml(tmp_path, data)
    spec = load_topology_file(path)
    assert spec.name == "my-cluster" and spec.node.gpus_per_node == 4
    assert spec.fabric.nic_bandwidth_bytes_per_s == pytest.approx(25e9)

    assert main(["predict", "--topology", str(path), "--gpus", "12", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    d = json.loads(out)
    assert d["topology"] == "my-cluster" and d["n_gpus"] == 12 and d["n_nodes"] == 3
    assert d["config"]["topology_file"] == str(path)

    # Halving the NIC rate of the same design slows the step down.
    assert main(["predict", "--link", "infiniband", "--gpus-per-node", "4", "--gpus", "12", "--json"]) == 0
    preset = json.loads(capsys.readouterr()[0])
    assert d["step_time_s"] > preset["step_time_s"]

    assert main(["collective", "--topology", str(path), "--gpus", "8", "-e", "1M", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["topology"] == "my-cluster"


def test_single_node_file_without_fabric(tmp_path, capsys):
    data = preset_dict("nvlink")
    data["name"] = "one-box"
    data["fabric"] = None
    path = write_yaml(tmp_path, data)
    assert main(["predict", "--topology", str(path), "--gpus", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["n_nodes"] == 1
    assert main(["predict", "--topology", str(path), "--gpus", "16"]) == 2
    _out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "--gpus: 16" in err and "no fabric" in err


def _mut(path: str, value):
    """A mutation of a preset dict: set (or with value ... delete) the dotted key."""
    def apply(d):
        *parents, leaf = path.split(".")
        for p in parents:
            d = d[p]
        if value is ...:
            del d[leaf]
        else:
            d[leaf] = value
    return apply


BAD_FIELDS = [
    # (mutation, needles in the one error line)
    (_mut("colour", "blue"), ["colour", "unknown key", "allowed keys", "fabric"]),
    (_mut("node.nvlinks", 18), ["node.nvlinks", "unknown key", "gpus_per_node"]),
    (_mut("fabric.speed", 400), ["fabric.speed", "unknown key", "nic_gbit_per_s"]),
    (_mut("fabric.nic_gbit_per_s", -400), ["fabric.nic_gbit_per_s", "-400", "number>0"]),
    (_mut("fabric.nic_gbit_per_s", 0), ["fabric.nic_gbit_per_s", "0", "number>0"]),
    (_mut("fabric.nic_gbit_per_s", "400Gbps"), ["fabric.nic_gbit_per_s", "'400Gbps'", "number>0"]),
    (_mut("node.gpu_link_gbyte_per_s", 0), ["node.gpu_link_gbyte_per_s", "0", "number>0"]),
    (_mut("node.pcie_gbyte_per_s", -63), ["node.pcie_gbyte_per_s", "-63", "number>0"]),
    (_mut("fabric.nic_efficiency", 1.2), ["fabric.nic_efficiency", "1.2", "(0, 1]"]),
    (_mut("fabric.nic_efficiency", 0), ["fabric.nic_efficiency", "0", "(0, 1]"]),
    (_mut("node.gpu_link_efficiency", 1.01), ["node.gpu_link_efficiency", "1.01", "(0, 1]"]),
    (_mut("node.gpu_link_efficiency", float("nan")), ["node.gpu_link_efficiency", "nan"]),
    (_mut("node.gpus_per_node", 8.5), ["node.gpus_per_node", "8.5", "int>0"]),
    (_mut("node.gpus_per_node", 8.0), ["node.gpus_per_node", "8.0", "int>0"]),
    (_mut("node.gpus_per_node", "8"), ["node.gpus_per_node", "'8'", "int>0"]),
    (_mut("node.gpus_per_node", True), ["node.gpus_per_node", "True", "int>0"]),
    (_mut("node.gpus_per_node", 0), ["node.gpus_per_node", "0", "int>0"]),
    (_mut("fabric.nics_per_node", 3), ["fabric.nics_per_node", "3", "does not divide", "gpus_per_node=8"]),
    (_mut("fabric.nodes_per_leaf", 0), ["fabric.nodes_per_leaf", "0", "int>0"]),
    (_mut("fabric.oversubscription", 0.5), ["fabric.oversubscription", "0.5", ">=1"]),
    (_mut("fabric.rail_optimized", "yes"), ["fabric.rail_optimized", "'yes'", "true|false"]),
    (_mut("fabric.nic_latency_us", -1), ["fabric.nic_latency_us", "-1", ">=0"]),
    (_mut("fabric.kind", "myrinet"), ["fabric.kind", "'myrinet'", "infiniband", "ethernet", "nvlink"]),
    (_mut("node.interconnect", "nvlink"), ["node.interconnect", "'nvlink'", "nvswitch", "pcie"]),
    (_mut("gpu", "x9000"), ["gpu", "'x9000'", "h100"]),
    (_mut("gpu", 100), ["gpu", "100", "GPU preset"]),
    (_mut("sources", "a paper"), ["sources", "'a paper'", "list of strings"]),
    (_mut("launch_overhead_us", "8us"), ["launch_overhead_us", "'8us'", ">=0"]),
    (_mut("collective_base_latency_us", 8.4), ["collective_base_latency_us", "no longer read", "launch_overhead_us"]),
    (_mut("name", ...), ["name", "missing"]),
    (_mut("name", "  "), ["name", "'  '", "string"]),
    # The name titles every table: a newline split it, an escape sequence coloured the terminal.
    (_mut("name", "a\nb\x1b[31m"), ["name", "one line of printable text"]),
    (_mut("description", 7), ["description", "7", "string"]),
    (_mut("node", ...), ["node", "missing", "mapping"]),
    # nic_efficiency may be left out (the transport gives it); the line rate may not without a NIC preset.
    (_mut("fabric.nic_gbit_per_s", ...), ["fabric.nic_gbit_per_s", "missing", "number>0"]),
    (_mut("fabric.transport", "tcp"), ["fabric.transport", "'tcp'", "socket", "efa"]),
    (_mut("fabric.transport", {"preset": "ib", "streams_per_connection": 0}),
     ["fabric.transport.streams_per_connection", "0", "int>0"]),
    (_mut("fabric.transport", {"preset": "roce", "qps": 4}), ["fabric.transport.qps", "streams_per_connection"]),
    (_mut("fabric.nic", "200gbe"), ["fabric.nic", "'200gbe'", "200gbe-tcp", "ib-ndr"]),
    (_mut("node.sockets", 2), ["node.sockets", "pcie-tree"]),
    (_mut("node.mesh_links", [[0, 1, 4]]), ["node.mesh_links", "nvswitch"]),
    (_mut("node", [8, "nvswitch"]), ["node", "mapping"]),
    (_mut("fabric", "infiniband"), ["fabric", "'infiniband'", "mapping"]),
]


@pytest.mark.parametrize("mutate, needles", BAD_FIELDS,
                         ids=[n[0] + ("-" + n[1] if len(n) > 1 else "") for _, n in BAD_FIELDS])
def test_strict_validation_names_field(tmp_path, capsys, mutate, needles):
    data = preset_dict("infiniband")
    mutate(data)
    path = write_yaml(tmp_path, data)
    with pytest.raises(TopologyError) as err:
        load_topology_file(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: ")
    for needle in needles:
        assert needle in msg, (needle, msg)
    # The same file through the CLI: one line, exit 2, no traceback.
    assert main(["predict", "--topology", str(path), "--gpus", "16"]) == 2
    out, err_text = capsys.readouterr()
    assert out == "" and "Traceback" not in err_text
    assert err_text.splitlines() == [f"dpsim: error: {msg}"]


def test_invalid_yaml_syntax_names_line(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\ngpu: h100\nnode:\n  gpus_per_node: [8\n  interconnect: nvswitch\n")
    with pytest.raises(TopologyError, match=r"broken\.yaml: not valid YAML at line \d+"):
        load_topology_file(path)
    assert main(["predict", "--topology", str(path)]) == 2
    _out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "not valid YAML at line" in err and "Traceback" not in err


def test_bad_indentation_names_line(tmp_path):
    path = tmp_path / "indent.yaml"
    path.write_text("name: x\n  bad: [\n")
    with pytest.raises(TopologyError, match="at line 2"):
        load_topology_file(path)


@pytest.mark.parametrize("text", ["- name: a\n- name: b\n", "42\n", "", "just a string\n"])
def test_document_that_is_not_a_mapping(tmp_path, text):
    path = tmp_path / "notmap.yaml"
    path.write_text(text)
    # An empty file holds no document at all, and is named so (fuzz9: it was "(top level): None is not valid").
    expected = r"holds no YAML document \(the file is empty or only comments\)" if not text else r"\(top level\): "
    with pytest.raises(TopologyError, match=expected + r".* expected a mapping"):
        load_topology_file(path)


def test_unreadable_files(tmp_path, capsys):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x90garbage\x80")
    for path, needle in [(binary, "UTF-8"), (tmp_path, "cannot read"), (tmp_path / "nope.yaml", "cannot read")]:
        with pytest.raises(TopologyError, match=needle):
            load_topology_file(path)
        assert main(["predict", "--topology", str(path)]) == 2
        _out, err = capsys.readouterr()
        assert len(err.splitlines()) == 1 and err.startswith("dpsim: error: --topology: ")


def test_errors_are_dpsim_errors():
    with pytest.raises(DpsimError):
        spec_from_dict([1, 2])
    with pytest.raises(DpsimError):
        load_preset("nope")


# ----------------------------------------------------------------------------- connectivity

def test_presets_are_connected():
    for name in PRESETS:
        spec = load_preset(name)
        for n_gpus in (1, spec.node.gpus_per_node, 8 * spec.node.gpus_per_node):
            Topology.from_spec(spec, n_gpus).check_connected()


def test_gpu_without_path_is_reported(monkeypatch, capsys):
    """The YAML schema cannot describe an unreachable GPU (every GPU joins its node's
    switch, every multi-node design has a fabric), so break the graph builder instead."""
    real_build_graph = cluster_mod.build_graph

    def build_graph_with_an_island(spec, n_nodes, *, into=None, **kw):
        g = real_build_graph(spec, n_nodes, **kw)
        g.remove_edges_from(list(g.in_edges(gpu_id(1, 3))) + list(g.out_edges(gpu_id(1, 3))))
        if into is None:
            return g
        for v, d in g.nodes(data=True):  # check_connected walks a Reach (no networkx)
            into.add_node(v, **d)
        for a, b in g.edges:
            into.add_edge(a, b)
        return into

    monkeypatch.setattr(cluster_mod, "build_graph", build_graph_with_an_island)
    topo = Topology.from_spec(load_preset("infiniband"), 16)
    with pytest.raises(TopologyError, match=r"GPU n1\.gpu3 has no path to n0\.gpu0"):
        topo.check_connected()
    assert main(["predict", "--link", "infiniband", "--gpus", "16"]) == 2
    _out, err = capsys.readouterr()
    assert err.splitlines() == [("dpsim: error: topology 'infiniband': GPU n1.gpu3 has no path to n0.gpu0; "
                                "check node.interconnect and fabric")]


# ----------------------------------------------------------------------------- graph invariants

def _variants():
    eth = load_preset("ethernet")
    ib = load_preset("infiniband")
    yield "ethernet", eth
    yield "infiniband", ib
    yield "nvlink", load_preset("nvlink")
    yield "pcie", load_preset("pcie")
    yield "eth-2nic-oversub3", dataclasses.replace(
        eth, fabric=dataclasses.replace(eth.fabric, nics_per_node=2, oversubscription=3.0, nodes_per_leaf=2))
    yield "ib-rail-oversub2", dataclasses.replace(
        ib, fabric=dataclasses.replace(ib.fabric, oversubscription=2.0, nodes_per_leaf=2))
    yield "ib-not-rail", dataclasses.replace(
        ib, fabric=dataclasses.replace(ib.fabric, rail_optimized=False, nodes_per_leaf=3))


VARIANTS = dict(_variants())


def _reach_cases():
    for name in preset_names():
        yield name, load_preset(name)
    for path in sorted((REPO / "topologies" / "examples").glob("*.yaml")):
        yield path.stem, load_topology_file(path)


@pytest.mark.parametrize("name, spec", [*_reach_cases(), *VARIANTS.items()])
@pytest.mark.parametrize("n_gpus_of", ["part", 1, 2, 5, 40])
def test_reach_is_the_networkx_graph(name, spec, n_gpus_of):
    """check_connected walks a Reach instead of a networkx graph (no networkx import on
    predict's path): the same nodes with the same attributes, the same successors and the
    same descendants as networkx's, whole clusters and representative slices alike."""
    gpn = spec.node.gpus_per_node
    n_gpus = max(1, gpn - 1) if n_gpus_of == "part" else n_gpus_of * gpn
    try:
        topo = Topology.from_spec(spec, n_gpus)
    except TopologyError:
        pytest.skip("not a valid size of this design")
    for t in (topo, topo.representative):
        g = t._graph(t.n_nodes, t.leaf_group_nodes)
        reach = t._graph(t.n_nodes, t.leaf_group_nodes, into=Reach())
        assert dict(reach.nodes(data=True)) == dict(g.nodes(data=True))
        assert {v: set(g.successors(v)) for v in g} == reach._succ
        gpus = t.gpu_ids(g)
        assert t.gpu_ids(reach) == gpus
        assert reach.descendants(gpus[0]) == nx.descendants(g, gpus[0])
        assert reach.descendants(gpus[-1]) == nx.descendants(g, gpus[-1])


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("n_nodes", [1, 2, 5])
def test_graph_is_full_duplex(name, n_nodes):
    g = build_graph(VARIANTS[name], n_nodes)
    assert g.number_of_edges() > 0
    for u, v, d in g.edges(data=True):
        assert g.has_edge(v, u), (u, v)
        back = g.edges[v, u]
        assert back["capacity_bytes_per_s"] == d["capacity_bytes_per_s"], (u, v)
        assert back["link_class"] == d["link_class"]
        assert d["capacity_bytes_per_s"] > 0 and math.isfinite(d["capacity_bytes_per_s"])
        assert d["latency_s"] >= 0


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("n_nodes", [1, 3])
def test_gpu_and_nic_counts_per_node(name, n_nodes):
    spec = VARIANTS[name]
    g = build_graph(spec, n_nodes)
    gpn = spec.node.gpus_per_node
    fabric = spec.fabric
    nics = 0 if fabric is None or fabric.kind == "nvlink" else fabric.nics_per_node
    for n in range(n_nodes):
        gpus = [v for v in kinds(g, "gpu") if g.nodes[v]["node"] == n]
        assert sorted(g.nodes[v]["local"] for v in gpus) == list(range(gpn))
        assert all(v == gpu_id(n, g.nodes[v]["local"]) for v in gpus)
        node_nics = [v for v in kinds(g, "nic") if g.nodes[v]["node"] == n]
        assert len(node_nics) == nics
        # every GPU reaches its node's switch at the GPU link rate x efficiency
        hub = f"n{n}.{spec.node.interconnect}"
        for v in gpus:
            assert g.edges[v, hub]["capacity_bytes_per_s"] == pytest.approx(
                spec.node.gpu_link_bandwidth_bytes_per_s * spec.node.gpu_link_efficiency)
    assert len(kinds(g, "gpu")) == n_nodes * gpn
    # GPUs share NICs evenly
    if nics and n_nodes > 0:
        per_pcie = [len([u for u in g.predecessors(f"n0.pcie{j}") if g.nodes[u]["kind"] == "gpu"])
                    for j in range(nics)]
        assert per_pcie == [gpn // nics] * nics


@pytest.mark.parametrize("name", ["ethernet", "infiniband", "pcie", "eth-2nic-oversub3",
                                  "ib-rail-oversub2", "ib-not-rail"])
def test_leaf_uplink_capacity(name):
    spec = VARIANTS[name]
    f = spec.fabric
    n_nodes = 2 * f.nodes_per_leaf + 1  # several leaf groups, so a spine exists
    g = build_graph(spec, n_nodes)
    rate = f.nic_bandwidth_bytes_per_s * f.nic_efficiency
    nics_per_leaf = f.nodes_per_leaf * (1 if f.rail_optimized else f.nics_per_node)
    expected = nics_per_leaf * rate / f.oversubscription
    uplinks = [(u, v) for u, v, d in g.edges(data=True) if d["link_class"] == "leaf-spine"]
    leaves = kinds(g, "leaf")
    rails = f.nics_per_node if f.rail_optimized else 1
    assert len(leaves) == math.ceil(n_nodes / f.nodes_per_leaf) * rails
    assert len(uplinks) == 2 * len(leaves)
    for u, v in uplinks:
        assert g.edges[u, v]["capacity_bytes_per_s"] == pytest.approx(expected)
    # every NIC port on its leaf runs at the NIC rate; a full leaf has nics_per_leaf ports
    full_leaf = "leaf0.0"
    ports = [u for u in g.predecessors(full_leaf) if g.nodes[u]["kind"] == "nic"]
    assert len(ports) == nics_per_leaf
    assert all(g.edges[p, full_leaf]["capacity_bytes_per_s"] == pytest.approx(rate) for p in ports)
    # non-blocking: uplink equals the leaf's down-link total
    if f.oversubscription == 1.0:
        assert expected == pytest.approx(len(ports) * rate)


def test_rail_optimised_nics_go_to_their_rail():
    spec = load_preset("infiniband")
    g = build_graph(spec, 3)
    for n in range(3):
        for j in range(spec.fabric.nics_per_node):
            assert g.has_edge(f"n{n}.nic{j}", f"leaf0.{j}")


def test_representative_uplinks_match_full_cluster():
    spec = VARIANTS["ib-rail-oversub2"]
    topo = Topology.from_spec(spec, 5 * spec.fabric.nodes_per_leaf * spec.node.gpus_per_node)

    def uplink_caps(g):
        return {d["capacity_bytes_per_s"] for _, _, d in g.edges(data=True) if d["link_class"] == "leaf-spine"}

    assert uplink_caps(topo.representative_graph) == uplink_caps(topo.graph)
    assert topo.representative.n_nodes == 4


@pytest.mark.parametrize("name", PRESETS)
def test_representative_graph_is_small_at_65536_gpus(name):
    spec = load_preset(name)
    # This process's CPU time: the bar is on building the graph, which the wall clock of a loaded 2-core
    # box overstates by every other process's turn on the core.
    start = time.process_time()
    topo = Topology.from_spec(spec, 65536)
    g = topo.representative_graph
    topo.check_connected()
    elapsed = time.process_time() - start
    assert topo.n_gpus == 65536 and topo.n_nodes == 65536 // spec.node.gpus_per_node
    assert g.number_of_nodes() < 200
    assert elapsed < 1.0
    # the slice is a real multi-node graph of whole nodes
    assert len(kinds(g, "gpu")) % spec.node.gpus_per_node == 0
    assert len({g.nodes[v]["node"] for v in kinds(g, "gpu")}) >= 2


def test_partial_node_drops_unused_gpus():
    topo = Topology.from_spec(load_preset("nvlink"), 3)
    assert topo.gpu_ids() == [gpu_id(0, 0), gpu_id(0, 1), gpu_id(0, 2)]
    assert topo.n_nodes == 1 and topo.gpus_per_node == 3


def test_gpus_per_node_override_keeps_nics_dividing():
    topo = Topology.from_spec(load_preset("infiniband"), 12, gpus_per_node=6)
    assert topo.spec.node.gpus_per_node == 6
    assert 6 % topo.spec.fabric.nics_per_node == 0
    g = topo.graph
    assert len(kinds(g, "gpu")) == 12


# ----------------------------------------------------------------------------- documentation

README = REPO / "topologies" / "README.md"


def test_readme_example_is_a_valid_topology(tmp_path, capsys):
    text = README.read_text()
    blocks = text.split("```yaml\n")[1:]
    assert blocks, "topologies/README.md has no yaml example"
    example = blocks[0].split("```")[0]
    path = tmp_path / "example.yaml"
    path.write_text(example)
    spec = load_topology_file(path)
    assert spec.fabric is not None and spec.description == "" and spec.sources == ()
    assert main(["predict", "--topology", str(path), "--gpus", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["n_nodes"] == 2


def test_readme_documents_every_key():
    text = README.read_text()
    for key in (*load_mod._TOP_KEYS, *load_mod._NODE_KEYS, *load_mod._FABRIC_KEYS):
        assert f"| `{key}` |" in text, key
    for value in (*INTRA_NODE_KINDS, *FABRIC_KINDS):
        assert f"`{value}`" in text, value


HARDWARE_CSV = REPO.parent / "shared" / "reference" / "hardware.csv"


@pytest.mark.skipif(not HARDWARE_CSV.exists(), reason="../shared/reference not present")
@pytest.mark.parametrize("name", PRESETS)
def test_preset_citations_name_existing_reference_rows(name):
    import csv
    import re

    with HARDWARE_CSV.open() as fh:
        ids = {row["id"] for row in csv.DictReader(fh)}
    cited = {m for s in load_preset(name).sources for m in re.findall(r"\bH\d{3}\b", s)}
    assert cited <= ids, cited - ids


def test_duplicate_key_is_refused_with_its_line(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("name: a\nname: b\n")
    with pytest.raises(TopologyError, match=r"line 2.*'name' appears twice"):
        load_topology_file(f)


def test_yaml_merge_keys_are_read_as_yaml_says(tmp_path, capsys):
    # ``<<: *base`` shares settings between jobs of a mix (or grids, topologies); the strict loader
    # refused it: "could not determine a constructor for the tag 'tag:yaml.org,2002:merge'".
    from dpsim.cli import main
    from dpsim.files import load_yaml_text

    doc = load_yaml_text("b: &b {x: 1, y: 2}\nc: {<<: *b, y: 3}\nd: {<<: [*b], z: 0}\n")
    assert doc["c"] == {"x": 1, "y": 3} and doc["d"] == {"x": 1, "y": 2, "z": 0}
    with pytest.raises(Exception, match="'y' appears twice"):  # a key written twice is still refused
        load_yaml_text("c: {<<: {x: 1}, y: 1, y: 2}\n")
    mix = tmp_path / "mix.yaml"
    mix.write_text("cluster: {link: nvlink, gpus: 16}\n"
                   "jobs:\n  - &job {name: a, model: gpt2, gpus: 8, steps: 3}\n  - {<<: *job, name: b}\n")
    assert main(["mix", str(mix), "--json"]) == 0
    assert [j["name"] for j in json.loads(capsys.readouterr().out)["jobs"]] == ["a", "b"]


@pytest.mark.parametrize("gpu, ok", [("a100", False), ("v100", False), ("h100", True)])
def test_nvls_true_needs_a_hopper_or_later_gpu(tmp_path, capsys, gpu, ok):
    # nvls: true on an A100 server ran NVLS (in-switch reduction) at a bus bandwidth above NVLink3's
    # line rate; NCCL builds NVLS kernels for compute capability 9.0 and later only.
    data = preset_dict("nvlink")
    data["node"]["nvls"] = True
    data["gpu"] = gpu
    path = write_yaml(tmp_path, data)
    args = ["collective", "--topology", str(path), "--gpus", "8", "-b", "1G", "-e", "1G"]
    status = main(args)
    err = capsys.readouterr().err
    if ok:
        assert status == 0
    else:
        assert status == 2 and err.count("\n") == 1 and "node.nvls: true" in err and gpu in err


def test_a_number_in_exponent_form_is_a_number(tmp_path, capsys):
    # YAML 1.1 needs a dot in a float: nic_gbit_per_s: 4e2 was the text '4e2', refused as
    # "'4e2' is not valid; expected number>0". YAML 1.2 and JSON read it as 400.
    from dpsim.files import load_yaml_text

    assert load_yaml_text("a: 4e2\nb: -1E-3\nc: '4e2'\nd: e3\n") == {"a": 400.0, "b": -0.001, "c": "4e2", "d": "e3"}
    data = preset_dict("infiniband")
    path = write_yaml(tmp_path, data)
    path.write_text(path.read_text().replace("nic_gbit_per_s: 400", "nic_gbit_per_s: 4e2"))
    assert "4e2" in path.read_text()
    assert main(["predict", "--topology", str(path), "--gpus", "16", "--model", "gpt2", "--json"]) == 0
    mine = json.loads(capsys.readouterr().out)["step_time_s"]
    assert main(["predict", "--link", "infiniband", "--gpus", "16", "--model", "gpt2", "--json"]) == 0
    assert mine == json.loads(capsys.readouterr().out)["step_time_s"]
