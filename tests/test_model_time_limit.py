"""A user's model builder that never returns is stopped at :data:`dpsim.limits.MAX_MODEL_LOAD_S`.

``--model file.py:fn`` runs the user's code: its import, its builder, its example input and its
forward and backward under the tracer. A ``while True`` in any of them hung ``dpsim predict``
(and the API) for ever; now it is one :class:`~dpsim.errors.WorkloadError` line naming the file,
the function and the limit, on the main thread (a ``SIGALRM`` timer) and on any other thread
(a watchdog). The limits here are a second or two; each case takes about that.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

pytest.importorskip("torch")

from dpsim.errors import DpsimError, WorkloadError  # noqa: E402
from dpsim.workload.from_torch import load_torch_workload  # noqa: E402

_GOOD = """
import torch
def build():
    return torch.nn.Linear(4, 4)
def example_input():
    return torch.zeros(2, 4)
"""

_LOOPS = {
    "import": "while True:\n    pass\n" + _GOOD,
    "builder": _GOOD + "\ndef build():\n    while True:\n        pass\n",
    "example": _GOOD + "\ndef example_input():\n    while True:\n        pass\n",
    "forward": _GOOD + """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
    def forward(self, x):
        while True:
            pass
def build():
    return M()
""",
    # The user's own ``except Exception`` must not swallow the stop.
    "swallowing": _GOOD + """
def build():
    while True:
        try:
            sum(range(1000))
        except Exception:
            pass
""",
    "sleeping": "import time\n" + _GOOD + "\ndef build():\n    time.sleep(3600)\n",
}


def _write(tmp_path, where: str):
    path = tmp_path / f"loops_in_{where}.py"
    path.write_text(_LOOPS[where])
    return f"{path}:build"


def _stopped(ref: str, limit_s: float) -> str:
    start = time.monotonic()
    with pytest.raises(WorkloadError) as exc:
        load_torch_workload(ref, time_limit_s=limit_s)
    assert time.monotonic() - start < limit_s + 20
    text = str(exc.value)
    assert "\n" not in text and "build()" in text and "loops_in_" in text and "within 0.5 s" in text, text
    return text


# Each case waits out the 0.5 s limit: one (a sleeping builder) stays in the fast lane, the other ways a
# builder never returns run with the slow tests (CI runs both).
@pytest.mark.parametrize("where", [w if w == "sleeping" else pytest.param(w, marks=pytest.mark.slow)
                                   for w in sorted(_LOOPS)])
def test_a_builder_that_never_returns_is_stopped_on_the_main_thread(tmp_path, where):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the SIGALRM path runs on the main thread only")
    _stopped(_write(tmp_path, where), 0.5)
    # Nothing is left armed: no alarm reaches the caller later.
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    time.sleep(0.1)


@pytest.mark.parametrize("where", ["builder", "forward", "swallowing"])
def test_a_builder_that_never_returns_is_stopped_on_another_thread(tmp_path, where):
    ref = _write(tmp_path, where)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _stopped(ref, 0.5)
        except BaseException as exc:  # noqa: BLE001 - reported to the test's thread below
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(60)
    assert not worker.is_alive() and not errors, errors


def test_a_caller_s_own_timer_is_left_alone(tmp_path):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the SIGALRM path runs on the main thread only")
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 30.0)
    try:
        _stopped(_write(tmp_path, "builder"), 0.5)
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < remaining < 30 and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


def test_a_model_that_finishes_in_time_is_traced_and_leaves_no_timer(tmp_path):
    path = tmp_path / "fine.py"
    path.write_text(_GOOD)
    model = load_torch_workload(f"{path}:build", time_limit_s=60)
    assert model.param_count == 20
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize("limit", [0, -1, float("nan"), float("inf"), "10", True])
def test_the_api_refuses_a_bad_time_limit(tmp_path, limit):
    path = tmp_path / "fine.py"
    path.write_text(_GOOD)
    with pytest.raises(DpsimError) as exc:
        load_torch_workload(f"{path}:build", time_limit_s=limit)
    assert str(exc.value).startswith("time_limit_s: "), exc.value


def test_the_command_line_stops_it_in_one_line(tmp_path, monkeypatch, capsys):
    from dpsim import limits
    from dpsim.cli.app import main

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the command line's signals are set on the main thread only")
    monkeypatch.setattr(limits, "MAX_MODEL_LOAD_S", 0.5)
    status = main(["predict", "--model", _write(tmp_path, "builder"), "--gpus", "2"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "\n" not in err and "within 0.5 s" in err and "MAX_MODEL_LOAD_S" in err, err


_CATCHES_EVERYTHING = _GOOD + """
def build():
    while True:
        try:
            while True:
                sum(range(1000))
        except BaseException:
            pass
"""


# Traces or runs real torch / a subprocess (1.5-5 s): the full suite runs it, the fast lane does not.
@pytest.mark.slow
def test_a_builder_that_catches_every_stop_ends_the_command(tmp_path):
    """``except BaseException`` in a loop swallows every stop raised into it: the ``dpsim`` command (its own
    process) then ends after :data:`~dpsim.workload.model_ref.RUNAWAY_GRACE_S`, with its one error line and
    status 2, where it ran for ever. (Limits of 0.5 s and 1 s here.)"""
    import subprocess
    import sys

    path = tmp_path / "catches.py"
    path.write_text(_CATCHES_EVERYTHING)
    code = ("import sys; from dpsim import limits; limits.MAX_MODEL_LOAD_S = 0.5; "
            "import dpsim.workload.model_ref as m; m.RUNAWAY_GRACE_S = 1.0; "
            "from dpsim.cli.app import run; "
            f"sys.argv = ['dpsim', 'predict', '--model', {str(path) + ':build'!r}, '--gpus', '2']; run()")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    err = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in err, (done.returncode, err)
    assert "within 0.5 s" in err and "caught every stop" in err and "except BaseException" in err, err
    assert time.monotonic() - start < 200


def test_the_api_never_ends_the_caller_s_process():
    """Only the console entry point turns the hard stop on: a library caller's process is its own."""
    import dpsim.workload.model_ref as m

    assert m._END_PROCESS == [False]
