"""A mix of different jobs on one cluster (``dpsim mix``): placement, shared links, slowdowns.

- :mod:`~dpsim.mix.spec` — the mix file (YAML) and its strict checks
- :mod:`~dpsim.mix.placement` — which servers a job gets when it arrives
- :mod:`~dpsim.mix.simulate` — every job on its own clock, collectives sharing links max-min
"""

from dpsim.mix.simulate import JobResult, LinkBlame, MixResult, simulate_mix
from dpsim.mix.spec import JobSpec, MixSpec, load_mix, mix_from_dict

__all__ = ["JobResult", "JobSpec", "LinkBlame", "MixResult", "MixSpec", "load_mix", "mix_from_dict", "simulate_mix"]
