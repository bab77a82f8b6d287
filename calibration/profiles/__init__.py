"""Calibration profiles shipped with dpsim (installed as ``dpsim.profiles``)."""
