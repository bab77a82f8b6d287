"""One local calibration rank: ``python -m dpsim.calibrate.worker PLAN.json RESULT.json``.

Started by :func:`dpsim.calibrate.runner.run_local` with torchrun's environment
variables; prints progress events on stdout and rank 0 writes its results to RESULT.
"""

import os
import sys

from dpsim.calibrate.runner import worker_main


def run_as_process(argv: list[str]) -> None:
    """:func:`worker_main` as a rank's process: a Python error exits with status 1 after its traceback,
    never through interpreter shutdown, where gloo's threads can be destroyed while running and C++'s
    std::terminate aborts the rank (status -6, as a validate rank did in CI on 2026-12-07:
    :func:`dpsim.validate.worker.run_as_process`); the supervisor then reports the error (its
    traceback's tail), not a rank killed by SIGABRT, which reads as the machine's failure."""
    try:
        code = worker_main(argv)
    except Exception:
        sys.excepthook(*sys.exc_info())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.exit(code)


if __name__ == "__main__":
    run_as_process(sys.argv[1:])
