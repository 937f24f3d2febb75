"""The Ray backend: evaluation stages run as Ray tasks on the hosts that hold accelerators; model calls stay on
the driver. Connects to an existing cluster (address) or starts a local one."""

from __future__ import annotations

import os
import re
import socket

__all__ = ["RayExecutor", "RayBackendError", "ray_available"]

# Settings the stage tasks need on other hosts; never anything that looks like a credential.
_ENV = re.compile(r"^(MAXKERNEL_.*|JAX_PLATFORMS|TPU_SKIP_MDS_QUERY|ALLOW_MULTIPLE_LIBTPU_LOAD|XLA_FLAGS)$")
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH)", re.I)


class RayBackendError(RuntimeError):
    """Ray is missing, cannot start, or the cluster has no host that can evaluate kernels."""


def ray_available() -> str | None:
    """None when Ray can be imported, else why not."""
    try:
        import ray  # noqa: F401
    except Exception as exc:  # noqa: BLE001  (a broken install raises more than ImportError)
        return f"Ray is not installed or broken ({type(exc).__name__}: {exc}); install it with pip install 'ray>=2.40'"
    return None


def _stage_task(stage: str, spec: dict, source: str) -> dict:
    import ray

    from maxkernel.search.evaluator import run_stage

    out = run_stage(stage, spec, source)
    out["executed_by"] = {"backend": "ray", "host": socket.gethostname(), "pid": os.getpid(),
                          "node_id": ray.get_runtime_context().get_node_id()}
    return out


class RayExecutor:
    """Callable like `run_stage`: device stages need one unit of `resource`; compiles need only a CPU."""

    device_limited = False  # Ray queues device tasks by the resource itself

    def __init__(self, address: str | None = None, resource: str = "maxkernel_device", devices: int = 1,
                 cpus: int | None = None):
        why = ray_available()
        if why:
            raise RayBackendError(why)
        import ray

        env = {k: v for k, v in os.environ.items() if _ENV.match(k) and not _SECRET.search(k)}
        self._owns = False
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=False)
                else:
                    ray.init(num_cpus=cpus or max(devices + 1, 2), resources={resource: devices},
                             include_dashboard=False, runtime_env={"env_vars": env}, log_to_driver=False)
                    self._owns = True
            except Exception as exc:  # noqa: BLE001  (Ray raises many kinds of start-up errors)
                where = f"connect to the Ray cluster at {address}" if address else "start a local Ray cluster"
                raise RayBackendError(f"could not {where}: {type(exc).__name__}: {exc}") from exc
        have = ray.cluster_resources().get(resource, 0)
        if have < 1:
            self.close()
            raise RayBackendError(
                f"no host in the Ray cluster offers the resource {resource!r}: start each accelerator host with "
                f"`ray start --address=HEAD --resources='{{\"{resource}\": 1}}'`, or choose a resource the hosts "
                "have (e.g. TPU or GPU)")
        self.resource = resource
        self.devices = int(have)
        self._device = ray.remote(_stage_task).options(resources={resource: 1}, num_cpus=1, max_retries=0)
        self._cpu = ray.remote(_stage_task).options(num_cpus=1, max_retries=0)

    def __call__(self, stage: str, spec: dict, source: str) -> dict:
        import ray

        fn = self._cpu if stage == "compile" else self._device
        try:
            return ray.get(fn.remote(stage, spec, source))
        except ray.exceptions.RayError as exc:
            raise RayBackendError(f"the Ray task for stage {stage} failed: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        if self._owns:
            import ray

            ray.shutdown()
            self._owns = False
