"""Shared fixtures: small topologies built from the presets."""

from __future__ import annotations

import dataclasses

import pytest

from dpsim.topology.load import load_preset
from dpsim.topology.spec import TopologySpec


def variant(name: str, **changes) -> TopologySpec:
    """A preset with fields of ``node``/``fabric``/top level replaced (``node__x=...``)."""
    spec = load_preset(name)
    node = {k[6:]: v for k, v in changes.items() if k.startswith("node__")}
    fabric = {k[8:]: v for k, v in changes.items() if k.startswith("fabric__")}
    top = {k: v for k, v in changes.items() if "__" not in k}
    if node:
        spec = dataclasses.replace(spec, node=dataclasses.replace(spec.node, **node))
    if fabric:
        spec = dataclasses.replace(spec, fabric=dataclasses.replace(spec.fabric, **fabric))
    return dataclasses.replace(spec, **top)


@pytest.fixture
def make_variant():
    return variant
