"""``dpsim calibrate``: measure collectives and compute with torch, fit, write a profile.

Modules (none imports torch: what a rank runs with torch is :mod:`dpsim.measure`, which the
rank processes import; ``predict`` reads profiles without it):

- :mod:`~dpsim.calibrate.fit` — numpy least-squares alpha-beta fits, piecewise by size, R²
- :mod:`~dpsim.calibrate.profile` — the versioned JSON schema, strict loading, atomic save
- :mod:`~dpsim.calibrate.model` — a profile as a :class:`~dpsim.collectives.CollectiveModel`
  and as compute rates, and how it extrapolates to other communicator sizes
- :mod:`~dpsim.calibrate.nccl_tests` — parser of nccl-tests output
- :mod:`~dpsim.calibrate.build` — measurements or logs -> fitted profile
- :mod:`~dpsim.measure.harness` — the torch benchmarks one rank runs (in :mod:`dpsim.measure`)
- :mod:`~dpsim.calibrate.runner` — local processes or torchrun, with timeouts
- :mod:`~dpsim.calibrate.command` — the CLI command's flow; :mod:`~dpsim.calibrate.report` tables
"""
