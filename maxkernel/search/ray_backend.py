"""The Ray backend: evaluation stages run as Ray tasks on the hosts that hold accelerators; model calls stay on
the driver. Connects to an existing cluster (address) or starts a local one. `run_each` runs one whole job per
item (a bench task, a kernel-table row) as Ray tasks, the driver keeping the records."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable

__all__ = ["RayExecutor", "RayBackendError", "ray_available", "run_each", "where"]

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


def where(backend: str) -> dict:
    """Which process ran a job: backend, host, pid (and the Ray node)."""
    out = {"backend": backend, "host": socket.gethostname(), "pid": os.getpid()}
    if backend == "ray":
        import ray

        out["node_id"] = ray.get_runtime_context().get_node_id()
    return out


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if _ENV.match(k) and not _SECRET.search(k)}


def _connect(address: str | None, **local) -> bool:
    """Join the cluster at `address`, or start a local one with `local` (num_cpus, resources); True when this
    process started it (and so shuts it down)."""
    import ray

    if ray.is_initialized():
        return False
    try:
        if address:
            ray.init(address=address, runtime_env={"env_vars": _env()}, log_to_driver=False)
            return False
        ray.init(include_dashboard=False, runtime_env={"env_vars": _env()}, log_to_driver=False, **local)
        return True
    except Exception as exc:  # noqa: BLE001  (Ray raises many kinds of start-up errors)
        what = f"connect to the Ray cluster at {address}" if address else "start a local Ray cluster"
        raise RayBackendError(f"could not {what}: {type(exc).__name__}: {exc}") from exc


def run_each(fn: Callable, items: list, *, concurrency: int, address: str | None = None,
             on_start: Callable | None = None, on_done: Callable | None = None) -> None:
    """fn(item) as one Ray task per item, at most `concurrency` at once; on_done(item, result) is called in the
    driver as each finishes (so the driver writes every record). A local cluster gets `concurrency` CPUs; a job
    that raises ends the run with RayBackendError after the finished ones were handed over. Jobs read and write
    the folders they are given: on a cluster of several hosts those must be on a filesystem every host shares."""
    why = ray_available()
    if why:
        raise RayBackendError(why)
    import ray

    owns = _connect(address, num_cpus=max(concurrency, 1))
    queue, running = list(items), {}
    try:
        remote = ray.remote(fn).options(num_cpus=1, max_retries=0)
        while queue or running:
            while queue and len(running) < concurrency:
                item = queue.pop(0)
                if on_start is not None:
                    on_start(item)
                running[remote.remote(item)] = item
            done, _ = ray.wait(list(running), num_returns=1)
            item = running.pop(done[0])
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayError as exc:
                raise RayBackendError(f"the Ray task for {item} failed: {type(exc).__name__}: {exc}") from exc
            if on_done is not None:
                on_done(item, result)
    except BaseException:
        for ref in running:  # a failed job (or the driver's own refusal of a result) ends the rest too
            ray.cancel(ref, force=True)
        raise
    finally:
        if owns:
            ray.shutdown()


def _stage_task(stage: str, spec: dict, source: str) -> dict:
    from maxkernel.search.evaluator import run_stage

    out = run_stage(stage, spec, source)
    out["executed_by"] = where("ray")
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

        self._owns = _connect(address, num_cpus=cpus or max(devices + 1, 2), resources={resource: devices})
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
