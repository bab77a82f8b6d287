"""Regenerate the shipped profiles from the published nccl-tests rows they cite.

    python calibration/fit_reference_profiles.py             # from calibration/reference/
    python calibration/fit_reference_profiles.py --refresh   # first re-copy the rows from
                                                             # ../shared/reference/collectives.csv

Steps (each output is committed, so CI needs nothing outside the repository):

1. ``calibration/reference/collectives_reference.csv``: the rows of
   ``collectives.csv`` the profiles use, verbatim, with their ``source`` and ``notes``
   columns (published measurements, each citing where it was published).
2. ``calibration/reference/nccl-tests/<profile>/<binary>.log``: each system's rows laid
   out as the nccl-tests table they were published as (out-of-place columns: time from
   the row's value, algbw/busbw from its notes). The header and device lines are
   reconstructed from the row metadata (rank count, nodes, GPUs per node), not the
   original capture; host names are placeholders. Every log cites its rows.
3. ``calibration/profiles/<profile>.json``: ``dpsim calibrate --from-nccl-tests`` on
   those logs, i.e. the same parser and fit a user's logs go through.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REFERENCE = HERE / "reference"
ROWS_CSV = REFERENCE / "collectives_reference.csv"
SHARED_CSV = REPO.parent / "shared" / "reference" / "collectives.csv"

PROFILES = {
    "a100-nvswitch-8gpu": {
        "description": "8x A100 SXM in one node over NVLink3/NVSwitch (nccl-tests all_reduce_perf, "
                       "published by stas00/ml-engineering)",
        "logs": {"intra_node": ("C001", "C007")},
    },
    "aws-p4de-2node": {
        "description": "2x AWS p4de.24xlarge (16x A100 80GB, EFA 400 Gb/s per node) across nodes; intra-node "
                       "from the 8x A100 SXM NVSwitch node of C001-C007 (same NVLink3/NVSwitch design, a "
                       "different machine)",
        "logs": {"inter_node": ("C043", "C049"), "intra_node": ("C001", "C007")},
    },
    "aws-p5-2node": {
        "description": "2x AWS p5.48xlarge (16x H100 80GB, EFA 3200 Gb/s per node) across nodes; no "
                       "intra-node rows published, so single-node predictions are refused",
        "logs": {"inter_node": ("C050", "C058")},
    },
}
"""Profiles and the row ranges (inclusive) each link class is fitted from."""

_BW = re.compile(r"algbw=([0-9.]+)\s*(?:GB/s)?\s*busbw=([0-9.]+)")


def refresh_rows(shared: Path) -> None:
    """Copy the rows every profile uses from the shared reference CSV, verbatim."""
    wanted = set()
    for spec in PROFILES.values():
        for lo, hi in spec["logs"].values():
            wanted |= {f"C{i:03d}" for i in range(int(lo[1:]), int(hi[1:]) + 1)}
    with shared.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = [r for r in reader if r["id"] in wanted]
        fields = reader.fieldnames
    missing = wanted - {r["id"] for r in rows}
    if missing:
        sys.exit(f"{shared}: rows {sorted(missing)} not found")
    with ROWS_CSV.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def load_rows() -> dict[str, dict]:
    with ROWS_CSV.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def row_range(rows: dict[str, dict], lo: str, hi: str) -> list[dict]:
    ids = [f"C{i:03d}" for i in range(int(lo[1:]), int(hi[1:]) + 1)]
    return [rows[i] for i in ids]


def nccl_tests_log(rows: list[dict]) -> str:
    """The rows as nccl-tests prints an all_reduce_perf run (out-of-place half)."""
    first = rows[0]
    n, gpn = int(first["gpus"]), int(first["gpus_per_node"])
    assert all(r["model_or_op"].startswith("all_reduce") and r["metric"] == "time_us" for r in rows)
    device = first["system"]
    ids = f"{rows[0]['id']}..{rows[-1]['id']}"
    sizes = [int(r["message_bytes_or_batch"]) for r in rows]
    lines = [
        f"# source: {ids} in calibration/reference/collectives_reference.csv: {first['source']}",
        f"# source notes: {first['notes']}",
        "# Reconstructed by calibration/fit_reference_profiles.py: the published out-of-place rows in "
        "nccl-tests' layout; the header and device lines come from the rows' metadata, host names are "
        "placeholders.",
        f"# {first['model_or_op']}",
        "# Collective test starting: all_reduce_perf",
        f"# nThread 1 nGpus {gpn} minBytes {min(sizes)} maxBytes {max(sizes)} step: 2(factor) warmup iters: 5 "
        f"iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for rank in range(n):
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {1000 + rank:6d} on     host-{rank // gpn} device "
                     f"{rank % gpn:2d} [0x00] {device}")
    lines += [
        "#",
        "#                                                              out-of-place",
        "#       size         count      type   redop    root     time   algbw   busbw",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
    ]
    for r in rows:
        size = int(r["message_bytes_or_batch"])
        time_us = float(r["value"])
        m = _BW.search(r["notes"])
        algbw, busbw = (float(m.group(1)), float(m.group(2))) if m else (
            size / time_us / 1e3, size / time_us / 1e3 * 2 * (n - 1) / n)
        lines.append(f"{size:>12d}  {size // 4:>12d}  {'float':>8s}  {'sum':>6s}  {'-1':>6s}  {time_us:>7.2f}"
                     f"  {algbw:>6.2f}  {busbw:>6.2f}")
    busbws = [float(l.split()[-1]) for l in lines if l and l[0] == " "]
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f} ", "#"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refresh", action="store_true", help=f"re-copy the rows from {SHARED_CSV}")
    ap.add_argument("--shared-csv", type=Path, default=SHARED_CSV)
    ap.add_argument("--out-dir", type=Path, default=HERE / "profiles")
    args = ap.parse_args(argv)
    if args.refresh:
        refresh_rows(args.shared_csv)
    rows = load_rows()
    sys.path.insert(0, str(REPO))
    from dpsim.calibrate.build import profile_from_nccl_tests
    from dpsim.profile.io import save_profile
    from dpsim.calibrate.summary import profile_report

    for name, spec in PROFILES.items():
        logs, notes = [], []
        for lc, (lo, hi) in spec["logs"].items():
            part = row_range(rows, lo, hi)
            notes.append(f"{lo}..{hi}: {part[0]['notes']}")
            system = re.sub(r"[^a-z0-9]+", "-", part[0]["system"].lower()).strip("-")
            path = REFERENCE / "nccl-tests" / f"{system}.all_reduce_perf.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(nccl_tests_log(part), encoding="utf-8")
            logs.append(path)
        profile = profile_from_nccl_tests(logs, name=name, description=spec["description"])
        # cite log paths relative to the repository
        env = dict(profile.environment)
        env["logs"] = [dict(l, path=str(p.relative_to(REPO))) for l, p in zip(env["logs"], logs)]
        env["source_notes"] = notes  # versions at capture, protocol remarks, as the rows state them
        from dataclasses import replace
        profile = replace(profile, environment=env)
        out = save_profile(profile, args.out_dir / f"{name}.json")
        print(profile_report(profile))
        for w in profile.warnings:
            print(f"warning: {w}")
        print(f"# wrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
