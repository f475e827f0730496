"""``python -m dsh_contract_tests``: the kit's command line.

``new NAME DIR`` writes a complete provider distribution into ``DIR`` (see
:mod:`dsh_contract_tests.scaffold`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dsh_contract_tests.scaffold import ScaffoldError, write_scaffold

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m dsh_contract_tests", description="The dsh provider contract kit."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser(
        "new",
        help="write a provider distribution that passes the kit, to start from",
        description="Write a complete provider distribution into DIR: a provider on "
        "dsh_subagent.ProductProvider around a scripted stand-in child, its Config, the "
        "entry point, the kit's test class and a README.",
    )
    new.add_argument("name", metavar="NAME", help="the provider's name, e.g. acme-agent")
    new.add_argument("directory", metavar="DIR", type=Path, help="a new or empty directory")
    args = parser.parse_args(argv)
    try:
        written = write_scaffold(args.name, args.directory)
    except ScaffoldError as exc:
        print(f"dsh_contract_tests new: {exc}", file=sys.stderr)
        return 2
    root = args.directory
    print(f"wrote the provider distribution {args.name!r} ({len(written)} files) to {root}")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(f"next: read {root / 'README.md'}, section 'Run the kit'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
