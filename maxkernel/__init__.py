"""maxkernel: write, verify, profile and tune JAX Pallas kernels with a pool of ADK agents."""

__version__ = "0.1.0"
__all__ = ["__version__"]
