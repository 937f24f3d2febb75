"""The mismatch goes back to the porter: after the harness's check fails a port, the porter's next request carries
that check's seed, dtype, output and worst element (the values of both sides too), read from the model's own
request through the real Runner, not from the policy's progress line. Run with --backward, which the policy must
hand to every round's check."""

from __future__ import annotations

from pathlib import Path

import pytest

from _extras import need_module

SOURCES = Path(__file__).parents[1] / "port" / "sources"


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_porters_next_request_carries_where_the_last_port_differed(tmp_path, monkeypatch):
    need_module("torch", extra="port")
    import maxkernel.port as port_pkg
    import maxkernel.porting as porting
    from maxkernel.agents.replay.model import ReplayLlm
    from maxkernel.settings import get_settings

    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    instructions: list[str] = []
    answer = ReplayLlm.generate_content_async

    async def recording(self, llm_request, stream=False):
        if self.role == "porter":
            instructions.append(str(llm_request.config.system_instruction or ""))
        async for response in answer(self, llm_request, stream):
            yield response

    reports = []
    check = port_pkg.check_port

    def recording_check(*args, **kwargs):
        reports.append(check(*args, **kwargs))
        return reports[-1]

    monkeypatch.setattr(ReplayLlm, "generate_content_async", recording)
    monkeypatch.setattr(port_pkg, "check_port", recording_check)
    try:
        doc = porting.run_port(f"{SOURCES / 'rmsnorm_module.py'}:RMSNorm", ["bf16[T=4096,H=2048]"], init=["dim=H"],
                               model="replay", seeds=1, backward=True)
    finally:
        get_settings.cache_clear()
    assert doc["equivalent"], doc["summary"]
    # Round 1's port (Gemma's (1 + weight)) fails the harness's check; round 2's passes.
    assert len(reports) == 2 and not reports[0].equivalent and reports[1].equivalent
    # --backward reaches the harness's check in the agent path: every round's check held the gradients too.
    assert all(r.backward for r in reports) and doc["port"]["backward"] is True
    m = reports[0].mismatch
    first = [i for i in instructions if "Debug round: 0" in i]
    second = [i for i in instructions if "Debug round: 1" in i]
    assert first and second, [i[:60] for i in instructions]
    assert all("FAILED" not in i for i in first)  # nothing to feed back before a check
    told = second[0].split("YOUR LAST PORT WAS CHECKED AND FAILED:", 1)[1]
    for fact in (reports[0].summary, f"seed {m['seed']}", m["dtype"], f"output {m['output']}",
                 f"worst element {m['worst_index']}", f"port {m['port']}", f"original {m['original']}",
                 f"{m['bad_elements']} elements off"):
        assert str(fact) in told, (fact, told[:1500])
