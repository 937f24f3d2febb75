"""The `maxkernel` command line (docs/cli.md is the contract: --json on stdout, one-line errors, exit codes 0/1/2)."""

from __future__ import annotations

import os
import sys

import click

from maxkernel.cli import agent, bench, integrate, kernels, mcp, port, report, search, task
from maxkernel.cli._common import UsageError

__all__ = ["main", "cli", "UsageError"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="maxkernel", prog_name="maxkernel")
def cli() -> None:
    """Write, verify, profile and tune JAX Pallas kernels."""


cli.add_command(bench.bench)
cli.add_command(task.task)
for _cmd in (*kernels.COMMANDS, agent.optimize, search.search, report.report, mcp.mcp, integrate.integrate,
             port.port):
    cli.add_command(_cmd)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: eval "$(maxkernel completion bash)"."""
    from click.shell_completion import get_completion_class

    comp = get_completion_class(shell)(cli, {}, "maxkernel", "_MAXKERNEL_COMPLETE")
    click.echo(comp.source())


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code: 0 the good answer (correct, compiles, passes, ...), 1 a bad answer
    (printed first) or an internal failure (one line on stderr, nothing on stdout), 2 usage error, 130 interrupted."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    from maxkernel.chips import accelerator_nodes

    if not accelerator_nodes():
        # A task's own jax code run here (7p's get_flops draws its batch) would otherwise start libtpu's runtime,
        # which finds no TPU and prints its host-bounds warnings into the command's output.
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        rv = cli.main(args=argv, prog_name="maxkernel", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
        return 2
    except click.UsageError as exc:  # ours and click's (missing option, bad choice): one line, exit 2
        click.echo(f"maxkernel: error: {_one_line(exc.format_message())}", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("maxkernel: interrupted", err=True)
        return 130
    except BrokenPipeError:  # `maxkernel bench list | head`
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, exit 1
        click.echo(f"maxkernel: internal error: {type(exc).__name__}: {_one_line(str(exc))[:500]}", err=True)
        from maxkernel.settings import get_settings

        if get_settings().debug:
            import traceback

            traceback.print_exc()
        return 1
    return rv if isinstance(rv, int) else 0
