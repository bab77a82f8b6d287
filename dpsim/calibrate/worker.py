"""One local calibration rank: ``python -m dpsim.calibrate.worker PLAN.json RESULT.json``.

Started by :func:`dpsim.calibrate.runner.run_local` with torchrun's environment
variables; prints progress events on stdout and rank 0 writes its results to RESULT.
"""

import sys

from dpsim.calibrate.runner import worker_main

if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
