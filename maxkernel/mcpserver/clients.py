"""What a coding agent is given beside the tools: the one workflow text (the Gemini CLI extension's context file and
the Claude Code skill are both made from it), the extension's custom commands, and the client configurations
(`maxkernel integrate`). Every tool and argument named here exists in the served schemas
(tests/mcpserver/test_clients.py checks them against `served_tools()`). Nothing here needs the `mcp` SDK.

The folders in the repository, integrations/gemini and integrations/claude, are `repo_files()` written out: after
an edit here, `python -m maxkernel.mcpserver.clients` rewrites them (a test fails while they differ)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["NAME", "VERSION", "GUIDE", "COMMANDS", "MARK", "server_entry", "gemini_extension", "claude_plugin",
           "claude_skill", "gemini_context", "repo_files", "write_repo_files"]

NAME = "maxkernel"  # the extension, the plugin, the skill and the MCP server are all called this
VERSION = "0.1.0"
DESCRIPTION = ("maxkernel's trusted harness for JAX Pallas kernels: compile for a TPU chip without one, strict "
               "tests, the sandboxed verdict, TPU estimates, autotuning, porting GPU operators.")
CONTEXT_FILE = "MAXKERNEL.md"
GEMINI_TIMEOUT_MS = 600_000
# In every generated text file: what wrote it, so `maxkernel integrate` replaces its own files and nothing else.
MARK = "<!-- written by maxkernel (maxkernel/mcpserver/clients.py); `maxkernel integrate` rewrites it -->"

GUIDE = """\
# maxkernel: JAX Pallas kernels, judged by a harness

The maxkernel MCP server gives you tools to write, check, judge, estimate and tune JAX Pallas kernels (your \
client may show their names with a prefix, such as mcp__maxkernel__compile_kernel in Claude Code). Every path is \
relative to the server's workspace root (the folder it was started with); a path outside it is refused.

## The workflow

Work in this order, and do not skip a step because the previous one looked fine.

1. **Plan.** Call `task_info(task=...)`: the reference code, input shapes and dtypes, the tolerance, the FLOPs. \
`list_tasks` names the suite's tasks. `read_example(task=...)` shows the closest real Pallas kernels, \
`chip_specs(chip=...)` the chip's VMEM and peaks, `pallas_api(name=...)` how the installed jax spells a name (check \
every Pallas name before using it). Choose the grid, the block shapes (last two dims multiples of 8 and 128 for \
f32), what stays in VMEM, and the accumulation dtype.
2. **Write.** `write_file(path="kernel.py", content=...)`: a Python file defining \
`def workload(*inputs)` with the baseline's signature and outputs, doing the work inside `pl.pallas_call` (work \
done with jnp outside it is not the kernel's). `read_file(path=...)` and `list_files` show what is there.
3. **Compile.** `compile_kernel(path="kernel.py", task=..., chip=...)`: the real Mosaic/XLA:TPU compiler for the \
chip, no TPU needed, at full size. On an error read its hint, fix, compile again.
4. **Test.** `test_kernel(path="kernel.py", task=...)`: the strict interpreter over several seeds (races, \
out-of-bounds reads, NaN scratch). Fix every mismatch it names before going on.
5. **Evaluate.** `evaluate_kernel(path="kernel.py", task=..., seeds=3)`: the harness's verdict, sandboxed, on \
fresh seeds, with integrity checks. Only the status "correct" counts.
6. **Estimate.** `estimate_kernel(path="kernel.py", task=..., chip=...)`: the kernel's and the XLA baseline's TPU \
time at full size on the chip, from libtpu's static profile floored by the roofline. `profile_kernel(path=...)` \
adds the per-op table and the roofline reading.
7. **Tune.** `tune_kernel(path="kernel.py", task=..., max_configs=8)` searches the kernel's TUNABLES and never \
picks an incorrect configuration. It reports the best configuration; write its values into the kernel's defaults, \
then evaluate and estimate again. Keep the fastest version the harness judged correct.

Pass the same `task`, `size` (smoke: CPU-sized, the default; full: benchmark-sized) and `chip` (v5e unless the \
person says otherwise) to every tool that takes them.

## What to believe

- **The verdict is the harness's, never yours.** A kernel is correct when `evaluate_kernel` says its status \
is "correct", and only then. Do not call a kernel correct, faster or done because it compiled, because \
`test_kernel` passed, or because the code looks right. Report the verdict as the tool returned it (status, reason, \
flags); if it is not "correct", say so and say why.
- **CPU time is not TPU speed.** Off a TPU, the kernel runs in the Pallas interpreter: the speedup in a verdict \
measured on a CPU ranks nothing. Never present it as a speedup.
- **The TPU estimate is an estimate.** Always label it so ("estimated on v5e, not measured"), with the chip it is \
for. Only a run on a real TPU measures speed.

## Where things land

- **The kernel** is the file you wrote in the workspace root (`kernel.py` unless you name another). \
`write_file` also keeps every version as an artifact in maxkernel's data folder (`~/.local/share/maxkernel` \
unless MAXKERNEL_DATA_DIR says otherwise).
- **The verdict** is `evaluate_kernel`'s reply, the same record as `maxkernel evaluate --json`. Nothing writes \
it to a file for you: save it with `write_file(path="verdict.json", content=...)` when the person wants it kept.
- **Profiles** go to `profiles/<task>-<time>/` in the workspace root.
- **A task made from the person's function** (`make_task`) is written to `tasks/<name>/` in maxkernel's data \
folder; its reply gives the folder's `path`: pass that as `task` to the other tools.

## The other jobs

- **Make a task from the person's JAX function:** `make_task(function="FILE.py:FUNCTION", args=[...])`, one \
spec per array argument such as "bf16[T=8192,H=4096]"; `static`, `arg_gens` and `name` are optional. Show the \
person its checks and ask before optimising it.
- **Port a GPU operator (PyTorch, Triton):** write the JAX port, then `check_port(path="jax_port.py", \
source="FILE.py:NAME", args=[...])` runs both in sandboxes on the same inputs and says where they differ; \
`init`, `dims`, `static` and `backward` describe the original further. A port that is equivalent can then be \
written as a Pallas kernel and judged as above.
- **Estimate on a chip:** `compile_kernel(path=..., task=..., chip=...)` first (a kernel that does not compile \
for the chip cannot be estimated), then `estimate_kernel(path=..., task=..., chip=...)`.
"""

# Gemini CLI custom commands (commands/maxkernel/<name>.toml: /maxkernel:<name>), each (description, prompt).
COMMANDS = {
    "optimise": (
        "Optimise a maxkernel task: plan, write, compile, test, evaluate, estimate, tune (TASK [CHIP])",
        """Optimise the maxkernel task named in these arguments: {{args}}
(the first word is the task, a suite name such as 12p_RMSNorm or a task folder in the workspace; a second word, \
if any, is the target chip, else v5e).

Follow the maxkernel workflow: `task_info` and `read_example` to plan; `write_file` the kernel to kernel.py; \
`compile_kernel` for the chip; `test_kernel`; `evaluate_kernel`; `estimate_kernel` for the chip; then \
`tune_kernel` and evaluate again. Pass the same task and chip to every tool.
The verdict is evaluate_kernel's, never yours. A speedup measured on a CPU is not TPU speed; the TPU estimate is \
labelled as an estimate. End with the kernel's path, its verdict as evaluate_kernel returned it, and its TPU \
estimate (labelled)."""),
    "port": (
        "Port a PyTorch or Triton operator to JAX, proven equivalent (FILE.py[:NAME] ARG-SPECS)",
        """Port this GPU operator to JAX: {{args}}
(FILE.py[:NAME] in the workspace, a PyTorch module or function or a Triton launcher, then the specs of its tensor \
arguments such as bf16[T=4096,H=2048]).

Read the original with `read_file`. Write the port with `write_file(path="jax_port.py", content=...)`, then run \
`check_port(path="jax_port.py", source=..., args=[...])` (add `init`, `dims`, `static` or `backward` where the \
original needs them). Fix every difference it reports and check again. Only check_port's "equivalent" answer \
counts; say so when it is not equivalent."""),
    "task": (
        "Make a maxkernel task from your own JAX function (FILE.py:FUNCTION ARG-SPECS)",
        """Make a maxkernel task from this JAX function: {{args}}
(FILE.py:FUNCTION in the workspace, then one spec per positional array argument, such as bf16[T=8192,H=4096] \
f32[4096]).

Call `make_task(function=..., args=[...])`, adding `static`, `arg_gens` or `name` if the arguments ask for them. \
Show the person its checks, tolerance and FLOPs, and the task folder's path it returns, and ask before optimising \
it. If it is refused, give the reason it returned; do not work around the checks."""),
    "estimate": (
        "Estimate a kernel's TPU time on a chip, without a TPU (KERNEL.py TASK [CHIP])",
        """Estimate the TPU time of this kernel: {{args}}
(the kernel file in the workspace, the task, and the chip, v5e if none is given).

First `compile_kernel(path=..., task=..., chip=...)`; if it does not compile, report the compiler's error and hint \
and stop. Then `estimate_kernel(path=..., task=..., chip=...)`. Report the kernel's and the XLA baseline's \
estimated times and what bounds the kernel, labelled as an estimate for that chip from libtpu's static profile, \
not a measurement. Do not call the kernel correct: only `evaluate_kernel` can."""),
}


def server_entry(command: list[str], root: str) -> dict:
    """The `mcpServers` entry that starts `COMMAND mcp --root ROOT` on stdio."""
    return {"command": command[0], "args": [*command[1:], "mcp", "--root", root]}


def gemini_context() -> str:
    return f"{MARK}\n\n{GUIDE}"


def claude_skill() -> str:
    return (f"---\nname: {NAME}\ndescription: Write, compile, test, judge, estimate and tune JAX Pallas (TPU) kernels "
            "with the maxkernel MCP tools; port PyTorch/Triton operators to JAX; make a benchmark task from a JAX "
            "function. Use when the person asks to optimise a maxkernel task, write or speed up a Pallas kernel, "
            "estimate a kernel on a TPU chip, or port a GPU operator.\n---\n\n" + gemini_context())


def _toml_string(text: str) -> str:
    """A TOML basic multi-line string holding `text` exactly (backslashes and quotes escaped)."""
    body = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'"""\n{body}"""'


def gemini_command(name: str) -> str:
    description, prompt = COMMANDS[name]
    return (f"# /{NAME}:{name}: written by maxkernel (maxkernel/mcpserver/clients.py)\n"
            f"description = {json.dumps(description)}\nprompt = {_toml_string(prompt + chr(10))}\n")


def gemini_extension(command: list[str], root: str) -> dict[str, str]:
    """The Gemini CLI extension's files (relative path -> text) for a server started as COMMAND mcp --root ROOT."""
    # timeout: Gemini CLI's own default for a session's calls (10 minutes), said outright because `gemini mcp list`
    # otherwise gives a server 5 s to start, and this one imports ADK and builds its agents' tools first.
    entry = {**server_entry(command, root), "timeout": GEMINI_TIMEOUT_MS}
    manifest = {"name": NAME, "version": VERSION, "description": DESCRIPTION, "mcpServers": {NAME: entry},
                "contextFileName": CONTEXT_FILE}
    files = {"gemini-extension.json": json.dumps(manifest, indent=2) + "\n", CONTEXT_FILE: gemini_context()}
    for name in COMMANDS:
        files[f"commands/{NAME}/{name}.toml"] = gemini_command(name)
    return files


def claude_plugin(command: list[str], root: str) -> dict[str, str]:
    """The Claude Code plugin's files: manifest, skill and MCP server entry."""
    manifest = {"name": NAME, "version": VERSION, "description": DESCRIPTION,
                "author": {"name": "maxkernel"}, "license": "Apache-2.0",
                "keywords": ["jax", "pallas", "tpu", "kernels", "mcp"]}
    return {".claude-plugin/plugin.json": json.dumps(manifest, indent=2) + "\n",
            ".mcp.json": json.dumps({"mcpServers": {NAME: server_entry(command, root)}}, indent=2) + "\n",
            f"skills/{NAME}/SKILL.md": claude_skill()}


def repo_files() -> dict[str, str]:
    """integrations/ in the repository: the extension and the plugin, with `maxkernel` found on PATH and the root
    the client's workspace (Gemini CLI's ${workspacePath}; Claude Code starts the server in the project folder)."""
    out = {f"integrations/gemini/{p}": t for p, t in gemini_extension([NAME], "${workspacePath}").items()}
    out.update({f"integrations/claude/{p}": t for p, t in claude_plugin([NAME], ".").items()})
    return out


def write_repo_files(repo: Path) -> list[Path]:
    written = []
    for rel, text in repo_files().items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":  # python -m maxkernel.mcpserver.clients: rewrite integrations/ from this module
    for p in write_repo_files(Path(__file__).resolve().parents[2]):
        print(p)
