"""User-facing errors.

Every mistake a user can make (a flag, a YAML key, a profile) raises a
:class:`DpsimError` subclass whose message says what was wrong, the value given and
what is allowed. The CLI catches :class:`DpsimError` once and prints that one line;
``assert`` is kept for internal invariants only.
"""


class DpsimError(Exception):
    """Base class of every error a user can act on."""


class ConfigError(DpsimError):
    """A flag, preset name or option value is not valid."""


class ConfigTypeError(ConfigError, TypeError):
    """A Python API argument of the wrong kind (``PredictConfig(parallelism={"tp": 2})``, an unknown setting): a
    :class:`ConfigError` whose one line names the field, the value and what is allowed, and a ``TypeError`` as
    Python's own call errors are."""


class TopologyError(DpsimError):
    """A topology description (preset or user YAML) is not valid."""


class WorkloadError(DpsimError):
    """A model or workload description is not valid."""


class ProfileError(DpsimError):
    """A calibration profile or measurement log is malformed."""


class UncalibratedLinkClass(ProfileError):
    """A calibration profile has no fit of the link class a communicator needs (``intra_node`` for one
    inside a server, ``inter_node`` for one across servers): predict refuses the job, plan refuses the
    layouts that need it and ranks the others."""

    def __init__(self, message: str, link_class: str | None = None):
        super().__init__(message)
        self.link_class = link_class
        """The link class the profile lacks (``None`` when re-raised with its message reworded: ``type(exc)(text)``
        by mix and sweep)."""


class CalibrationError(DpsimError):
    """A calibration run failed (a rank died or hung, a backend is unavailable)."""


class DpsimWarning(UserWarning):
    """Something the user chose that runs but deserves a second look (a sequence past a model's trained context):
    ``warnings.warn`` for the Python API, one ``dpsim: warning: ...`` line on stderr from the command line."""


class Interrupted(BaseException):
    """The run was stopped by a signal (SIGINT: Ctrl-C, or SIGTERM) and must end now.

    A ``BaseException``, like ``KeyboardInterrupt``, so that no ``except Exception`` on
    the way swallows it while ``finally`` blocks and context managers still clean up.
    The command line turns it into one line and exit status 128 + the signal number.
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        """The signal's number."""

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by the signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum
