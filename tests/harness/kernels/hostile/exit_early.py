"""Hostile: exits the process during import, hoping a missing result reads as success."""

import os

os._exit(0)


def workload(x, scale):
    return x
