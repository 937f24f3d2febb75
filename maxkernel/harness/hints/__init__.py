"""Hints for every error family and a lint for bugs no CPU check fails on (`diagnose.py`), and each VMEM buffer's
footprint for out-of-VMEM errors (`vmem_footprint.py`). Imports nothing else of the harness."""
