"""The torch side of dpsim: what runs inside a rank to measure the real thing.

Every module here imports torch at its top, and only rank processes import them
(``dpsim calibrate``'s and ``dpsim validate``'s workers); ``predict`` and the rest of the
package never do.

- :mod:`~dpsim.measure.trainstep` — the user's training step (model, batch, loss, optimizer)
  and its timing per layer
- :mod:`~dpsim.measure.harness` — one calibrate rank's whole program (:func:`~dpsim.measure.harness.run_rank`)
- :mod:`~dpsim.measure.bench_collectives` — collectives over a size sweep, nccl-tests style
- :mod:`~dpsim.measure.bench_compute` — matmul, copies, the training step, interference, fresh processes
- :mod:`~dpsim.measure.timing` — clocks, step reports and the watchdog
- :mod:`~dpsim.measure.step_probe` — the step timed in a fresh process (``python -m dpsim.measure.step_probe``)
"""
