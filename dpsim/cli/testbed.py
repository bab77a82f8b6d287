"""``dpsim testbed up|down|status``: the emulated cluster (network namespaces, shaped NICs).
"""

from __future__ import annotations

from typing import Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.errors import ConfigError
from dpsim.limits import MAX_EMULATED_HOSTS, MAX_OVERSUBSCRIPTION, check_int, check_number

testbed_app = typer.Typer(add_completion=False, help="An emulated cluster: network namespaces with shaped NICs (needs root).",
                          no_args_is_help=True)


@testbed_app.command("up")
def testbed_up(
    hosts: int = typer.Option(2, "--hosts", help="Hosts (namespaces) to create."),
    nic: str = typer.Option("1gbit", "--nic", help="NIC rate of every host, e.g. 100mbit, 1gbit, 3gbit."),
    racks: int = typer.Option(1, "--racks", help="Racks; hosts are split into consecutive blocks."),
    oversubscription: float = typer.Option(1.0, "--oversubscription", help="Rack uplink oversubscription."),
) -> None:
    """Create a testbed and leave it up; prints its tag (give it to `testbed down`).

    At most 64 hosts; --oversubscription at most 1,000.
    """
    check_int(hosts, "--hosts", 1, MAX_EMULATED_HOSTS)
    check_int(racks, "--racks", 1, hosts)
    check_number(oversubscription, "--oversubscription", 1, MAX_OVERSUBSCRIPTION)
    from dpsim.validate.testbed import Testbed, TestbedSpec, parse_rate_bits_per_s

    spec = TestbedSpec(hosts=hosts, nic_bits_per_s=parse_rate_bits_per_s(nic), racks=racks,
                       rack_oversubscription=oversubscription)
    tb = Testbed(spec=spec)
    try:
        tb.up()
    except BaseException:
        tb.down()
        raise
    print(f"{tb.tag} up: {hosts} hosts at {nic}; host i runs in namespace {tb.tag}-h<i> at {tb.host_ip(0)[:-1]}<i+1>")


@testbed_app.command("down")
def testbed_down(
    tag: Optional[str] = typer.Argument(None, help="Tag printed by `testbed up`."),
    all_: bool = typer.Option(False, "--all", help="Remove every testbed of yours that no running process uses "
                                                 "(another user's, or one a running validate uses, stay up)."),
) -> None:
    """Remove a testbed (only namespaces dpsim created for it)."""
    from dpsim.validate.testbed import down_all, down_tag

    if all_ == (tag is not None):
        raise ConfigError("testbed down: give a TAG or --all (one of them)")
    if all_:
        removed, skipped = down_all()
        for line in skipped:
            print(line)
    else:
        down_tag(tag)
        removed = [tag]
    for t in removed:
        print(f"{t} down")


@testbed_app.command("status")
def testbed_status(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the testbeds that are up."""
    from dpsim.validate.testbed import list_testbeds

    beds = list_testbeds()
    if as_json:
        _emit_json({"schema": "dpsim.testbeds/1", "testbeds": beds})
        return
    if not beds:
        print("no testbed is up")
    for s in beds:
        spec = s["spec"]
        print(f"{s['tag']}: {spec['hosts']} hosts, {spec['nic_bits_per_s'] / 1e6:g} Mbit/s, "
              f"{spec['racks']} rack(s), {s.get('kind', 'up')} of {s.get('owner', '?')}"
              f"{', in use by process ' + str(s.get('pid')) if s.get('in_use') else ''}; "
              f"namespaces: {' '.join(s['namespaces'])}")
