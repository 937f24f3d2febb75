"""`python -m maxkernel.search [search options]` or `python -m maxkernel.search status DIR`: the search commands
without the main CLI (same options, output and exit codes as `maxkernel search`)."""

import argparse
import os
import sys

from maxkernel.search.cli_commands import add_search_parser


def main(argv: list[str] | None = None) -> int:
    from maxkernel.cli import UsageError

    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    parser = argparse.ArgumentParser(prog="maxkernel")
    add_search_parser(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(["search", *(sys.argv[1:] if argv is None else argv)])
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"maxkernel: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
