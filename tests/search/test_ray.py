"""The Ray backend on a local cluster: model calls stay in this process, every evaluation stage runs as a Ray
task needing the accelerator resource, and a cluster without that resource is refused with what to do."""

from __future__ import annotations

import os

import pytest
from _extras import need_module

from maxkernel.search import Graph, make_config, run_search
from maxkernel.search.ray_backend import RayBackendError, RayExecutor

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(autouse=True, scope="module")
def _ray():
    need_module("ray", extra="ray")


# 116 s on a quiet machine, 195 s beside two other Ray tests: CI's load took it past the default 300 s once.
@pytest.mark.timeout(600)
def test_search_evaluates_on_ray_tasks(tmp_path, replay_env):
    config = make_config("12p_RMSNorm", algorithm="beam", backend="ray", profile=False, limits={"max_nodes": 1},
                         beam={"width": 1, "branches": 1, "depth": 1})
    result = run_search(tmp_path, config)
    assert result["status"] == "correct", result
    rows = Graph(tmp_path)._con().execute("SELECT stage, result FROM evals").fetchall()
    import json

    where = {r["stage"]: json.loads(r["result"]).get("executed_by") for r in rows}
    assert set(where) == {"compile", "interpret", "timing", "heldout"}
    assert all(w and w["backend"] == "ray" and w["pid"] != os.getpid() for w in where.values()), where


def test_a_cluster_without_the_resource_is_refused():
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.raises(RayBackendError, match="ray start"):
            RayExecutor(resource="no_such_accelerator")
    finally:
        ray.shutdown()
