"""Shared test set-up: CPU-only JAX, and the suite's tasks as a parameter list."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
