"""Porting GPU code (a PyTorch module or function, a Triton kernel with its launcher, a CUDA kernel through its
PyTorch oracle) to a pure-JAX reference that the harness proves equivalent, then to a task folder."""

from maxkernel.port.check import PortReport, check_port
from maxkernel.port.spec import PortSpec, SpecError, build_spec

__all__ = ["PortReport", "PortSpec", "SpecError", "build_spec", "check_port"]
