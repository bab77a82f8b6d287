"""The one table of ``dpsim`` commands: name -> where the command is defined.

This table is the only place that turns functions into commands, so ``dpsim --help``
lists exactly what it names. It imports nothing: a command's module is imported only
when that command is looked up (:class:`~dpsim.cli.app.LazyCommands`), so ``dpsim
predict`` does not pay for the imports of ``calibrate``, ``plan`` or ``goodput``.
"""

COMMANDS = {
    "predict": "dpsim.cli.predict:predict",
    "memory": "dpsim.cli.memory:memory",
    "collective": "dpsim.cli.collective:collective",
    "models": "dpsim.cli.models:models",
    "report": "dpsim.cli.plan:report",
    "sweep": "dpsim.cli.plan:sweep_command",
    "goodput": "dpsim.cli.goodput:goodput_command",
    "plan": "dpsim.cli.layout_plan:plan_command",
    "mix": "dpsim.cli.mix:mix_command",
    "calibrate": "dpsim.cli.calibrate:calibrate",
    "validate": "dpsim.cli.validate:validate",
    "testbed": "dpsim.cli.testbed:testbed_app",
}
"""Command name -> ``module:attribute``: a function (typer builds the options from its
signature) or a ``typer.Typer`` (a command group with subcommands of its own)."""
