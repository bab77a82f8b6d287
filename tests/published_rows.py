"""The job ``validation/accuracy_large_models.py`` builds for one published row, for tests that check a
row's memory or settings by hand (one place for the import of the validation script)."""
from __future__ import annotations

import sys
from pathlib import Path


def large_model_job(row_id: str):
    """``(row, job)`` of ``tests/data/large_model_runs.csv``'s row ``row_id``, as the accuracy script runs it."""
    folder = str(Path(__file__).resolve().parents[1] / "validation")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import accuracy_large_models

    row = next(r for r in accuracy_large_models.rows() if r["id"] == row_id)
    return row, accuracy_large_models.job_of(row)
