"""A mix of different jobs on one cluster (``dpsim mix``): placement, shared links, slowdowns.

- :mod:`~dpsim.mix.spec` — the mix file (YAML) and its strict checks
- :mod:`~dpsim.mix.placement` — which servers a job gets when it arrives
- :mod:`~dpsim.mix.simulate` — every job on its own clock, collectives sharing links max-min
- :mod:`~dpsim.mix.outages` — cables between switches that fail: the capacity the fabric has left
"""

from dpsim.mix.outages import LinkOutage
from dpsim.mix.simulate import FailureRecord, JobResult, LinkBlame, MixResult, Stretch, simulate_mix
from dpsim.mix.spec import (CheckpointSpec, FailureEvent, FailureSpec, JobSpec, MixSpec, UplinkFailure, load_mix,
                            mix_from_dict)

__all__ = ["CheckpointSpec", "FailureEvent", "FailureRecord", "FailureSpec", "JobResult", "JobSpec", "LinkBlame",
           "LinkOutage", "MixResult", "MixSpec", "Stretch", "UplinkFailure", "load_mix", "mix_from_dict", "simulate_mix"]
