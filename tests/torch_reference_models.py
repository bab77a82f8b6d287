"""The torch reference models now live in :mod:`dpsim.workload.torch_models`.

``dpsim calibrate --model NAME`` times them layer by layer, so they ship with the
package; this module keeps the name the tests import (``import torch_reference_models``).
"""

import sys

from dpsim.workload import torch_models as _torch_models

sys.modules[__name__] = _torch_models
