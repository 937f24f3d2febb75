"""Hostile: kills its own process with a segmentation fault."""

import ctypes

ctypes.string_at(0)


def workload(x, scale):
    return x
