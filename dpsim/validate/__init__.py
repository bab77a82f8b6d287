"""Closed-loop validation: real DDP training against dpsim's prediction of it."""
