"""Workloads: what each replica computes (layers, parameters, FLOPs) and how DDP buckets it."""
