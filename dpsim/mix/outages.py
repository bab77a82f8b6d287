"""Cables between switches that fail and come back while a mix runs: the capacity the fabric has left.

The cluster's network (:class:`~dpsim.network.tiers.TierNetwork`) stands for the parallel cables from
a switch to the tier above with one link per direction, its flows spread evenly over them (ECMP;
:func:`~dpsim.topology.fabric.uplink_cables` counts them). When ``d`` of a switch's ``n`` cables are
down the jobs crossing them are not stopped: adaptive routing, ECMP re-hashing or the subnet
manager's new routes move their flows onto the ``n - d`` cables left, so the same routes share a
bundle of ``(n - d) / n`` of its capacity, and every job crossing it contends harder. The mix's
sharing runs on that narrower network until the cables are repaired
(:meth:`dpsim.mix.simulate.MixSimulation.set_capacity`).

A switch keeps at least one uplink cable here: losing every one cuts its servers off, which is a
failure of those servers (give them as ``node`` events). A drawn failure that would take a switch's
last cable is not applied, and overlapping events take at most the cables left but one.

A server's NICs are bundles too where the topology puts several behind one GPU (more NICs than
GPUs, e.g. 32 EFA NICs on 8 GPUs: :class:`~dpsim.topology.fabric.NicLayout`'s ports): a failed
``link`` there takes one port of its bundle out, as ``--degrade node<K>.nic<J>`` scales it, and the
job goes on; only the bundle's last port stops the job like a server failure. With one NIC per GPU
(or fewer) a failed NIC link stops the job: moving a GPU's traffic onto another rail's NIC would be
a new route, which the network does not model.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.mix.spec import DrawnFailures, FailureSpec
from dpsim.topology.fabric import level_class, uplink_cables

_UPLINK_STREAM = 1
"""Spawn key of the switch cables' random stream (the servers' draws stay those of ``seed`` alone)."""


@frozen_dataclass
class LinkOutage:
    """Cables between switches that were down during the mix."""

    switch: str
    """The switch below the cables (``leaf3.0``, ``spine1``), or the server's NIC bundle whose ports
    failed (``n7.nic1``: NIC node 1 of server 7)."""
    link_class: str
    """``leaf-spine``, ``spine-core``... (a NIC's: ``infiniband``, ``ethernet``)."""
    cables: int
    """Cables (NIC ports) of the bundle that failed."""
    of_cables: int
    """Cables (NIC ports) of the bundle in all."""
    start_s: float
    """When they failed."""
    end_s: float
    """When they were back (may be past the mix's end)."""
    servers: tuple[int, int]
    """First and last server below the switch."""
    jobs: tuple[str, ...]
    """Jobs whose flows crossed them while they were down."""
    drawn: bool
    """Drawn from ``mtbf_uplink`` (else an explicit event)."""

    def to_dict(self) -> dict:
        return {"switch": self.switch, "class": self.link_class, "cables": self.cables, "of_cables": self.of_cables,
                "start_s": self.start_s, "end_s": self.end_s, "servers": list(self.servers), "jobs": list(self.jobs),
                "drawn": self.drawn}


def ports_per_nic(network) -> int:
    """NIC ports bundled behind one NIC node of ``network``'s servers (1: none bundled)."""
    return network.layout.ports_per_nic if getattr(network, "nic_kind", False) else 1


def _summary(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:3])}, ..., {', '.join(names[-2:])}"


class FabricOutages:
    """The switch cables of a mix that are down (explicit events and seeded random failures), the NIC
    ports of bundles that are (:meth:`fail_port`, driven by the server failures), and the link
    capacities they leave (:meth:`capacity`)."""

    def __init__(self, network, failures: FailureSpec, healthy: np.ndarray, horizon_s: float | None = None):
        if not hasattr(network, "uplink_bundles"):
            raise ConfigError("failures.events: uplink failures need the cluster's own network (its switch tiers); "
                              "this network has none")
        self.network = network
        self.healthy = healthy
        self.bundles = network.uplink_bundles()
        cables = uplink_cables(network.spec) if self.bundles else ()
        self.cables = [cables[bundle[3]] for bundle in self.bundles]
        self.classes = [level_class(bundle[3]) for bundle in self.bundles]
        self.index = {name: b for b, (name, *_) in enumerate(self.bundles)}
        self.ports = ports_per_nic(network)
        self.down = [0] * len(self.bundles)
        self.repair_s = failures.uplink_repair_s if failures.uplink_repair_s is not None else failures.repair_s
        self.queue: list[tuple] = []  # (time, order, bundle, cables, repair, drawn)
        self.repairs: list[tuple] = []  # (time, order, bundle, cables)
        self.order = 0
        names = [name for name, *_ in self.bundles]
        for e in failures.uplink_events:
            b = self.index.get(e.switch)
            if b is None:
                allowed = f"this cluster's switches with uplinks are {_summary(names)}" if names else \
                    "this cluster has no switch tier above its leaves (one leaf, or no NIC fabric)"
                raise ConfigError(f"failures.events: uplink {e.switch!r} is not valid; {allowed}")
            if e.cables >= self.cables[b]:
                raise ConfigError(f"failures.events: uplink {e.switch!r} with cables {e.cables} is not valid; it has "
                                  f"{self.cables[b]} uplink cable(s), at most {self.cables[b] - 1} may fail (with all "
                                  f"of them down its servers are cut off: fail them as nodes)")
            heapq.heappush(self.queue, (e.at_s, self.order, b, e.cables,
                                        e.repair_s if e.repair_s is not None else self.repair_s, False))
            self.order += 1
        present = sorted(set(self.classes))
        mtbf = dict(failures.uplink_mtbf_s)
        for c in mtbf:
            if c not in present:
                raise ConfigError(f"failures.mtbf_uplink.{c}: {c!r} is not valid; this cluster's switch link classes "
                                  f"are {', '.join(present) or 'none (no switch tier above its leaves)'}")
        self.weight = np.array([n / mtbf.get(c, math.inf) for n, c in zip(self.cables, self.classes)], dtype=float)
        self.rate = float(self.weight.sum())
        self.cumulative = np.cumsum(self.weight)
        self.rng = np.random.default_rng([failures.seed, _UPLINK_STREAM])
        self._log: list[list] = []  # [bundle, cables, start, end, drawn, jobs crossing]
        self._open: dict[int, list] = {}  # repair order -> its entry of _log, while down
        self.drawn = DrawnFailures(self.rate, horizon_s, "failures.mtbf_uplink", "switch cables")
        self._draw(0.0)

    def _draw(self, now: float) -> None:
        if self.rate > 0:
            self.drawn.count()
            t = now + float(self.rng.exponential(1.0 / self.rate))
            u = float(self.rng.random()) * self.rate
            b = min(int(np.searchsorted(self.cumulative, u, side="right")), len(self.cumulative) - 1)
            heapq.heappush(self.queue, (t, self.order, b, 1, self.repair_s, True))
            self.order += 1

    def next_s(self) -> float:
        """Time of the next failure or repair of a switch cable."""
        return min(self.queue[0][0] if self.queue else math.inf, self.repairs[0][0] if self.repairs else math.inf)

    def handle(self, now: float, crossing) -> np.ndarray:
        """Repairs and failures due at ``now``; returns the links whose capacity changed (empty: none).
        ``crossing(links)``: the names of the jobs whose flows cross ``links`` now."""
        changed: list[int] = []
        while self.repairs and self.repairs[0][0] <= now:
            _, order, b, n = heapq.heappop(self.repairs)
            self.down[b] -= n
            del self._open[order]
            changed.append(b)
        while self.queue and self.queue[0][0] <= now:
            _, _, b, n, repair, drawn = heapq.heappop(self.queue)
            if drawn:
                self._draw(now)
            if self._fail(b, n, now, repair, drawn, crossing):
                changed.append(b)
        links = [link for b in dict.fromkeys(changed) for link in self.bundles[b][1:3]]
        return np.array(links, dtype=np.int64)

    def _fail(self, b: int, n: int, now: float, repair: float, drawn: bool, crossing) -> bool:
        """``n`` cables of bundle ``b`` down until ``now + repair`` (never its last one); whether any went."""
        n = min(n, self.cables[b] - 1 - self.down[b])
        if n <= 0:
            return False  # the bundle's last cable: see the module docstring
        self.down[b] += n
        heapq.heappush(self.repairs, (now + repair, self.order, b, n))
        _, up, down, *_ = self.bundles[b]
        self._open[self.order] = entry = [b, n, now, now + repair, drawn, dict.fromkeys(crossing({up, down}))]
        self._log.append(entry)
        self.order += 1
        return True

    def fail_port(self, server: int, nic: int, now: float, repair: float, drawn: bool, crossing) -> np.ndarray:
        """NIC ``nic`` of ``server`` fails where it is one port of a bundle: the links whose capacity
        changed (empty: it was the bundle's last port, or NICs are not bundled here: the caller stops
        the job on that server)."""
        if self.ports <= 1:
            return np.zeros(0, dtype=np.int64)
        name = f"n{server}.nic{nic // self.ports}"
        b = self.index.get(name)
        if b is None:
            up, down = self.network.server_nic_links(server, nic // self.ports).tolist()
            b = self.index[name] = len(self.bundles)
            self.bundles.append((name, up, down, -1, server, server))
            self.cables.append(self.ports)
            self.classes.append(self.network.link_classes[int(self.network.link_class_id[up])])
            self.down.append(0)
        if not self._fail(b, 1, now, repair, drawn, crossing):
            return np.zeros(0, dtype=np.int64)
        return np.array(self.bundles[b][1:3], dtype=np.int64)

    def seen(self, job: str, links: frozenset) -> None:
        """Job ``job`` now sends flows over ``links`` (it arrived, or moved to a spare): it crosses the
        cables down among them."""
        for entry in self._open.values():
            _, up, down, *_ = self.bundles[entry[0]]
            if up in links or down in links:
                entry[5][job] = None

    @property
    def log(self) -> list[LinkOutage]:
        """Every outage so far, in time order."""
        out = []
        for b, n, start, end, drawn, jobs in self._log:
            name, _, _, _, first, last = self.bundles[b]
            out.append(LinkOutage(switch=name, link_class=self.classes[b], cables=n, of_cables=self.cables[b],
                                  start_s=start, end_s=end, servers=(first, last), jobs=tuple(jobs), drawn=drawn))
        return out

    def capacity(self) -> np.ndarray:
        """Every link's capacity with the cables down now (the healthy array itself when none is)."""
        if not any(self.down):
            return self.healthy
        out = self.healthy.copy()
        for b, d in enumerate(self.down):
            if d:
                _, up, down, *_ = self.bundles[b]
                out[[up, down]] *= (self.cables[b] - d) / self.cables[b]
        return out
