"""One local calibration rank: ``python -m dpsim.calibrate.worker PLAN.json RESULT.json``.

Started by :func:`dpsim.calibrate.runner.run_local` with torchrun's environment
variables; prints progress events on stdout and rank 0 writes its results to RESULT.
"""

import sys

from dpsim.calibrate.runner import worker_main
from dpsim.processes import run_as_rank


def run_as_process(argv: list[str]) -> None:
    """:func:`worker_main` as a rank's process (:func:`dpsim.processes.run_as_rank`: a Python error exits
    with status 1 after its traceback, not through a shutdown where gloo's threads abort the rank)."""
    run_as_rank(lambda: worker_main(argv))


if __name__ == "__main__":
    run_as_process(sys.argv[1:])
