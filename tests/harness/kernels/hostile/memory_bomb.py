"""Hostile: tries to allocate far more memory than the sandbox allows, then keeps going."""

import numpy as np

HOARD = []
for _ in range(1000):
    HOARD.append(np.ones(1 << 30, dtype=np.uint8))  # 1 GiB each, touched


def workload(x, scale):
    return x
