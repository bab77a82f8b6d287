"""Benchmark: how long ``dpsim`` takes to start, against the import floor measured in the same run.

Run: ``python tests/benchmarks/bench_cli_startup.py``. Prints the median wall time of
whole processes: ``python -c pass``; the import floor ``python -c 'import numpy, networkx,
simpy, yaml, rich, typer'`` (the libraries every command needs); ``python -m dpsim --help``;
``predict --help``; and ``predict`` itself on 8 GPUs (start-up plus a small prediction);
each with its ratio to the floor. Then which heavy modules a plain ``dpsim predict`` loads
(torch must not be one; pydantic comes from typer's argument conversion). Commands import
their machinery when they run (dpsim/cli/), so ``--help`` should sit near the floor. Not
a test: these machines are shared and noisy.
"""

from __future__ import annotations

import json
import subprocess
import sys

from wall_time import REPEATS, wall

FLOOR = [sys.executable, "-c", "import numpy, networkx, simpy, yaml, rich, typer"]
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import floor": FLOOR,
    "dpsim --help": [sys.executable, "-m", "dpsim", "--help"],
    "dpsim predict --help": [sys.executable, "-m", "dpsim", "predict", "--help"],
    "dpsim predict --gpus 8": [sys.executable, "-m", "dpsim", "predict", "--gpus", "8", "--link", "nvlink"],
}
WATCH = ("torch", "pandas", "plotly", "dask", "pydantic", "scipy", "networkx", "simpy")
PROBE = ("import contextlib, io, json, sys\n"
         "from dpsim.cli import main\n"
         "with contextlib.redirect_stdout(io.StringIO()):\n"
         "    main(sys.argv[1:])\n"
         "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(%r))))" % (WATCH,))


def main() -> None:
    floor = wall(FLOOR)
    print(f"{'command':<24} {'wall s':>7} {'x floor':>8}   (median of {REPEATS})")
    for name, cmd in COMMANDS.items():
        t = floor if cmd is FLOOR else wall(cmd)
        print(f"{name:<24} {t:>7.3f} {t / floor:>8.2f}")
    for args in (["--help"], ["predict", "--gpus", "8", "--link", "nvlink"]):
        out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True).stdout
        print(f"heavy modules loaded by dpsim {' '.join(args)}: {', '.join(json.loads(out)) or 'none'}")


if __name__ == "__main__":
    main()
