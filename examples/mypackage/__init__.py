"""An example package for the ``package.module:fn`` form of ``--model`` (run dpsim from ``examples/``)."""
