"""A sweep's grid: axes named after :class:`~dpsim.predict.PredictConfig` fields, from flags or YAML, validated.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsim.api_args import checked_constructor
from dpsim.errors import ConfigError, DpsimError
from dpsim.files import read_yaml_file
from dpsim.hardware import get_gpu
from dpsim.network.degrade import LinkDegradation, parse_degradation
from dpsim.limits import short, yaml_written
from dpsim.plan.cost import PriceOverride, check_price_override, parse_count
from dpsim.predict.config import (SETTINGS, PredictConfig, canonical_name, check_value, field_kind, plain_number,
                                  stage_layers_text)
from dpsim.profile.io import load_profile
from dpsim.topology.load import load_preset, load_topology_file
from dpsim.variability.spec import VariabilitySpec
from dpsim.workload.catalog import CATALOG_ENTRIES, get_entry, get_model
from dpsim.workload.precision import PRECISION_ALIASES
from dpsim.workload.model_ref import is_torch_model_ref, model_ref_next_to, parse_model_ref
from dpsim.workload.shapes import is_shape_ref, parse_shape, shape_ref

AXIS_ALIASES = {"topology": "topology_file"}
"""Command-line spellings of ``PredictConfig`` fields."""

_NONE_WORDS = {"none", "null", "default", "~"}
_TRUE_WORDS = {"true", "on", "yes", "1"}
_FALSE_WORDS = {"false", "off", "no", "0"}
SPEC_KEYS = ("grid", "tokens", "samples", "gpu_hour_usd", "degrade")
"""Top-level keys of a sweep YAML file."""


def sweep_axes() -> tuple[str, ...]:
    """Every ``PredictConfig`` setting by its flat name: each is a sweep axis."""
    return SETTINGS


def axis_name(name: str, origin: str = "sweep") -> str:
    """The ``PredictConfig`` field an axis name (``micro-batch``, ``topology``...) refers to."""
    key = str(name).strip().replace("-", "_").lstrip("_")
    key = AXIS_ALIASES.get(key, key)
    axes = sweep_axes()
    if key not in axes:
        allowed = sorted(set(axes) - set(AXIS_ALIASES.values()) | set(AXIS_ALIASES))
        # The nearest names first: the whole list (~970 characters) is cut at the command line's 800, and a
        # misspelt strategy or tp was refused with a list that ended before the name it meant.
        near = difflib.get_close_matches(key, allowed, n=3)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise ConfigError(f"{origin}: {name!r} is not a sweep axis; {hint}choose among {', '.join(allowed)}")
    return key


def _describe(kind: type, optional: bool, choices: tuple[str, ...]) -> str:
    name = ("one of " + ", ".join(choices) if choices else
            {int: "an integer", float: "a number", str: "a string", bool: "true/false (on/off)"}[kind])
    return name + (" or null" if optional else "")


def _where(origin: str, axis: str) -> str:
    # A command-line flag (``--gpus``) names the axis itself; a file or API origin does not.
    return origin if origin.startswith("-") else f"{origin} {axis}"


def convert_value(axis: str, raw: Any, origin: str = "sweep", *, from_file: bool = False) -> Any:
    """``raw`` (a YAML value or command-line text) as the type of field ``axis``; ``from_file``: a refusal names
    the value as the file writes it (``true``, ``null``), else as Python does (``True``, ``None``).

    Only the spelling is read here (``on`` is true, ``default`` is null, ``"8"`` is 8);
    whether the value is allowed is :func:`dpsim.predict.config.check_value`'s to say.
    """
    kind, optional, choices = field_kind(axis)
    raw = plain_number(raw, kind)  # numpy's scalars, as PredictConfig takes them
    where = _where(origin, axis)
    if axis == "stage_layers" and isinstance(raw, (list, tuple)):
        # One point's block counts as a list (YAML's [5, 9, 9, 9], sweep(stage_layers=[[5, 9, 9, 9]])), as
        # PredictConfig(stage_layers=[5, 9, 9, 9]) takes them: refused "expected a string or null".
        try:
            raw = stage_layers_text(raw)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {re.sub(r'^[^:]*: ', '', str(exc), count=1)}") from None
    expected = _describe(kind, optional, choices)
    text = raw.strip() if isinstance(raw, str) else None
    # A sweep file's gpus: [true] was "True is not valid; expected an integer" and gpus: null "None": Python's
    # spellings, which the file does not hold (the API's dicts keep them).
    given = yaml_written(raw, 200) if from_file else repr(raw)
    if raw is None or (text is not None and text.lower() in _NONE_WORDS):
        if optional:
            return None
        raise ConfigError(f"{where}: {given} is not valid; expected {expected}")
    bad = ConfigError(f"{where}: {given} is not valid; expected {expected}")
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if text is not None and text.lower() in _TRUE_WORDS | _FALSE_WORDS:
            return text.lower() in _TRUE_WORDS
        raise bad
    if kind is int:
        if isinstance(raw, bool):
            raise bad
        if isinstance(raw, int):
            return raw
        if text is not None and re.fullmatch(r"[-+]?\d+", text):
            return int(text)
        if isinstance(raw, float) and raw.is_integer():
            # One rule with the command line's --gpus text and PredictConfig(gpus=16.0): an integer is written as
            # one. A file's bare 1e3 (YAML reads a float) was taken as 1000 while its quoted "1e3" was refused.
            raise ConfigError(f"{where}: {given} is not valid; expected an integer, written as one "
                              f"({int(raw)}, not a float)")
        raise bad
    if kind is float:
        if isinstance(raw, bool):
            raise bad
        if isinstance(raw, (int, float)):
            value = float(raw)
        else:
            try:
                value = float(text) if text is not None else math.nan
            except ValueError:
                raise bad from None
        if not math.isfinite(value):
            raise bad
        return value
    if isinstance(raw, str) and text:
        return text
    if choices and isinstance(raw, int) and not isinstance(raw, bool) and str(raw) in choices:
        return str(raw)  # ``fsdp_version: [2]``: YAML reads the choice '2' as a number
    raise bad


def _canonical(axis: str, value: Any) -> Any:
    """``value`` as a point runs it, for telling repeats apart: a precision's old name is its new one
    (``precision=amp,amp-bf16`` ran the same point twice)."""
    if axis == "precision" and isinstance(value, str):
        return PRECISION_ALIASES.get(value, value)
    # Catalog models and GPU presets are looked up case-insensitively (get_entry, get_gpu): model=gpt2,GPT2 and
    # gpu=h100,H100 each ran one point twice, both rows named gpt2 (h100).
    if axis == "model" and isinstance(value, str) and value.strip().lower() in CATALOG_ENTRIES:
        return value.strip().lower()
    if axis == "gpu" and isinstance(value, str):
        return value.strip().lower()
    if axis == "model" and is_shape_ref(value):
        # One shape in two key orders (hidden=768,layers=12 / layers=12,hidden=768) ran twice, both rows "transformer".
        try:
            return shape_ref(parse_shape(value))
        except DpsimError:
            return value
    return value


def _check_domain(axis: str, value: Any, where: str) -> None:
    """Check one value now, so that a typo fails before a long sweep runs.

    The field's own rule is :func:`~dpsim.predict.config.check_value`'s; what needs loading
    (a preset, a catalog model, a GPU, a topology file, a calibration profile) is loaded here.
    """
    try:
        check_value(axis, value)
        if value is None:
            return
        if axis == "link":
            load_preset(value)
        elif axis == "model":
            if is_torch_model_ref(value):
                # A builder (file.py:fn), as predict takes it: traced when its point runs. It was
                # refused as "not a catalog model", though --model's help offers it.
                parse_model_ref(value, calls=True)
            else:
                get_entry(value)
        elif axis == "gpu":
            get_gpu(value)
        elif axis == "topology_file":
            load_topology_file(value)
        elif axis == "calibration":
            load_profile(value)
    except DpsimError as exc:
        message = str(exc)
        if axis != "topology_file":
            # The message names a predict flag ("--model: 'x' is not ..."): name the axis instead.
            message = re.sub(r"^[^:]*: ", "", message, count=1)
        raise ConfigError(f"{where}: {message}") from None


def parse_degrade(raw: Any, origin: str = "--degrade") -> tuple[LinkDegradation, ...]:
    """A sweep's degraded links: ``None`` (none), one item or a list of ``LINK:PCT%`` text or
    :class:`~dpsim.network.degrade.LinkDegradation` (what ``predict --degrade`` takes, one flag per item)."""
    if raw is None:
        return ()
    items = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    out = []
    for item in items:
        if isinstance(item, LinkDegradation):
            out.append(item)
        elif isinstance(item, str):
            try:
                out.append(parse_degradation(item))
            except ConfigError as exc:
                # parse_degradation names --degrade: a YAML file's key is named where it came from.
                raise ConfigError(re.sub(r"^--degrade", origin, str(exc), count=1)) from None
        else:
            raise ConfigError(f"{origin}: {item!r} is not valid; expected LINK:PCT% text (e.g. infiniband:50%) or a "
                              f"dpsim.network.degrade.LinkDegradation")
    return tuple(out)


@checked_constructor("dpsim.SweepSpec")
@dataclass(frozen=True)
class SweepSpec:
    """A grid of predictions plus an optional training budget and price overrides."""

    axes: dict[str, tuple] = field(default_factory=dict)
    """``PredictConfig`` field -> values, in grid order (the last axis varies fastest)."""
    tokens: float | None = None
    """Token budget for time-to-train and cost."""
    samples: float | None = None
    """Sample budget (image models), instead of tokens."""
    gpu_hour_usd: PriceOverride = None
    """Price override: one number for every GPU, or per GPU preset."""
    degradations: tuple[LinkDegradation, ...] = ()
    """Links below capacity in every point (``--degrade``, ``predict``'s; a name is checked against each
    point's cluster when it runs, so a node one point lacks is that point's error)."""

    def __post_init__(self) -> None:
        if self.tokens is not None and self.samples is not None:
            raise ConfigError("sweep: give a token budget (tokens) or a sample budget (samples), not both")
        # predict's own checks of --degrade (LinkDegradation items, how many, what one link keeps): one validator.
        VariabilitySpec(degradations=self.degradations)
        # A spec built directly (dpsim.SweepSpec is exported) was checked for empty axes alone: axes="x" ended in
        # AttributeError "'str' object has no attribute 'items'", an unknown axis in PredictConfig's TypeError at the
        # first point, axes={"gpus": "16"} ran the points "1" and "6", and gpu_hour_usd=-5 (or "x", or {"foo": 1})
        # left every cost null in silence. Now the same rules as from_grid's.
        if not isinstance(self.axes, Mapping):
            raise ConfigError(f"SweepSpec axes: {short(self.axes)} is not valid; expected a mapping of PredictConfig "
                              f"setting to a tuple of its values (or build it with SweepSpec.from_grid)")
        axes: dict[str, tuple] = {}
        for axis, values in self.axes.items():
            if axis not in SETTINGS:
                known = axis_name(axis, "SweepSpec axes")  # an unknown name is refused there, with the choices
                raise ConfigError(f"SweepSpec axes: {axis!r} is not valid; give the setting's name, {known!r}")
            if not isinstance(values, (list, tuple, range)):
                raise ConfigError(f"sweep {axis}: {short(values)} is not valid; expected a tuple of values (a single "
                                  f"value as a tuple of one, or build the spec with SweepSpec.from_grid)")
            if not values:
                raise ConfigError(f"sweep {axis}: the axis has no values; give at least one")
            axes[axis] = tuple(values)
        object.__setattr__(self, "axes", axes)
        for name in ("tokens", "samples"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, parse_count(getattr(self, name), f"sweep {name}"))
        object.__setattr__(self, "gpu_hour_usd", check_price_override(self.gpu_hour_usd, "sweep gpu_hour_usd"))

    @classmethod
    def from_grid(cls, grid: Mapping[str, Any] | None = None, *, tokens: float | str | None = None,
                  samples: float | str | None = None, gpu_hour_usd: PriceOverride = None,
                  origin: str = "sweep", base_dir: Path | None = None, degrade: Any = None) -> SweepSpec:
        """Build and validate a spec from ``{axis: value or list of values}``; ``degrade``: links below capacity
        in every point, as ``predict --degrade`` text (``infiniband:50%``) or
        :class:`~dpsim.network.degrade.LinkDegradation` (:func:`parse_degrade`)."""
        if grid is None:
            grid = {}
        if not isinstance(grid, Mapping):
            raise ConfigError(f"{origin}: grid is {type(grid).__name__}; expected a mapping of axis to values")
        axes: dict[str, tuple] = {}
        for name, raw in grid.items():
            axis = axis_name(name, origin)
            if axis in axes:
                raise ConfigError(f"{origin}: axis {name!r} is given twice")
            # A range or a one-dimensional array (np.arange) is a list of values too: sweep(gpus=range(8, 65, 8)) read
            # it as one value, "range(8, 65, 8) is not valid; expected an integer".
            many = isinstance(raw, (list, tuple, range)) or (hasattr(raw, "tolist") and getattr(raw, "ndim", 0) == 1)
            values = list(raw) if many else [raw]
            if not values:
                raise ConfigError(f"{_where(origin, axis)}: [] has no values; give at least one")
            converted = []
            for v in values:
                value = canonical_name(axis, convert_value(axis, v, origin, from_file=base_dir is not None))
                if axis == "topology_file" and value is not None and base_dir is not None:
                    value = str((base_dir / value)) if not Path(value).is_absolute() else value
                if base_dir is not None and axis == "model":
                    value = model_ref_next_to(value, base_dir)  # a builder file, as the topology: next to the file
                if (base_dir is not None and axis == "calibration" and isinstance(value, str)
                        and value.endswith(".json") and not Path(value).is_absolute()):
                    value = str(base_dir / value)  # a profile file (a shipped name stays), as mix reads it
                _check_domain(axis, value, _where(origin, axis))
                converted.append(value)
            if len({repr(_canonical(axis, v)) for v in converted}) != len(converted):
                raise ConfigError(f"{_where(origin, axis)}: {values!r} repeats a value; give each value once")
            axes[axis] = tuple(converted)
        return cls(axes=axes,
                   tokens=None if tokens is None else parse_count(tokens, f"{origin} tokens"),
                   samples=None if samples is None else parse_count(samples, f"{origin} samples"),
                   gpu_hour_usd=check_price_override(gpu_hour_usd, f"{origin} gpu_hour_usd"),
                   degradations=parse_degrade(degrade, _where(origin, "degrade")))

    @classmethod
    def from_dict(cls, data: Any, origin: str = "sweep", base_dir: Path | None = None) -> SweepSpec:
        """A spec from a parsed sweep YAML document (see the module docstring)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{origin}: the document is {type(data).__name__}; expected a mapping with "
                              f"keys {', '.join(SPEC_KEYS)}")
        unknown = [k for k in data if k not in SPEC_KEYS]
        if unknown:
            raise ConfigError(f"{origin}: {unknown[0]!r} is not a sweep key; choose among {', '.join(SPEC_KEYS)}")
        if "grid" not in data:
            raise ConfigError(f"{origin}: grid is missing; give a mapping of axis to values (e.g. gpus: [8, 16])")
        spec = cls.from_grid(data["grid"], origin=f"{origin}: grid", base_dir=base_dir)
        tokens, samples = data.get("tokens"), data.get("samples")
        return cls(axes=spec.axes,
                   tokens=None if tokens is None else parse_count(tokens, f"{origin}: tokens"),
                   samples=None if samples is None else parse_count(samples, f"{origin}: samples"),
                   gpu_hour_usd=check_price_override(data.get("gpu_hour_usd"), f"{origin}: gpu_hour_usd"),
                   degradations=parse_degrade(data.get("degrade"), f"{origin}: degrade"))

    @classmethod
    def from_yaml(cls, path: str | Path) -> SweepSpec:
        """Read and validate a sweep YAML file."""
        data = read_yaml_file(path, "--config", ConfigError)  # the name as given ('' is refused, not read as '.')
        path = Path(path)
        spec = cls.from_dict(data, origin=str(path), base_dir=path.parent)
        return spec

    def with_axes(self, overrides: SweepSpec) -> SweepSpec:
        """This spec with ``overrides``' axes, budget and prices taking precedence."""
        axes = dict(self.axes)
        axes.update(overrides.axes)
        tokens, samples = self.tokens, self.samples
        if overrides.tokens is not None or overrides.samples is not None:
            tokens, samples = overrides.tokens, overrides.samples
        prices = overrides.gpu_hour_usd if overrides.gpu_hour_usd is not None else self.gpu_hour_usd
        degradations = overrides.degradations or self.degradations  # --degrade replaces the file's degrade:
        return SweepSpec(axes=axes, tokens=tokens, samples=samples, gpu_hour_usd=prices, degradations=degradations)

    @property
    def size(self) -> int:
        """Number of grid points."""
        return math.prod(len(v) for v in self.axes.values())

    @property
    def varying(self) -> list[str]:
        """Axes with more than one value."""
        return [a for a, v in self.axes.items() if len(v) > 1]

    def points(self) -> list[dict[str, Any]]:
        """Every grid point as ``{axis: value}``, in grid order (the last axis varies fastest);
        :class:`~dpsim.predict.PredictConfig` is built (and may refuse it) per point."""
        self._check_default_seq_len()
        names = list(self.axes)
        return [dict(zip(names, combo)) for combo in itertools.product(*(self.axes[n] for n in names))]

    def _check_default_seq_len(self) -> None:
        """A ``seq_len`` axis with ``None`` (the model's own sequence) and a length equal to it runs every such
        point twice (``--seq-len none,1024`` on gpt2), as a precision's old and new names did. Checked here, where
        the model axis is final (the command line adds its axes one flag at a time), and only where each model
        of the grid builds the same at both (a model whose default differs keeps both points)."""
        seqs = self.axes.get("seq_len", ())
        if None not in seqs:
            return
        models = self.axes.get("model") or (PredictConfig.__dataclass_fields__["model"].default,)
        for value in seqs:
            if value is None:
                continue
            try:
                if not all(get_model(m) == get_model(m, seq_len=value) for m in models):
                    continue
            except DpsimError:  # a builder file, or a length the model refuses: its point says so when it runs
                continue
            own = ", ".join(str(m) for m in models)
            raise ConfigError(f"sweep seq_len: {list(seqs)!r} repeats a value: {value} is {own}'s own sequence "
                              f"length, which None (the model's default) runs too; give one of them")

    def point_label(self, point: dict[str, Any]) -> str:
        """``gpus=12, link=nvlink``: the point's values on the axes that vary (all when none does)."""
        return (", ".join(f"{k}={v}" for k, v in point.items() if len(self.axes.get(k, ())) > 1)
                or ", ".join(f"{k}={v}" for k, v in point.items()))

    def configs(self) -> list[PredictConfig]:
        """Every grid point, in grid order (the last axis varies fastest).

        Each value was checked on its own when the axis was read; a combination that
        ``PredictConfig`` refuses (``bucket_cap_mb`` with ``zero3``...) is an error naming
        the point.
        """
        out = []
        for point in self.points():
            try:
                out.append(PredictConfig(**point))
            except ConfigError as exc:
                raise ConfigError(f"sweep point {self.point_label(point)}: {exc}") from None
        return out
