"""``python -m dsh_contract_tests``: the kit's command line.

``new NAME DIR`` writes a complete provider distribution into ``DIR`` (see
:mod:`dsh_contract_tests.scaffold`); ``verify PROVIDER`` runs every rule of the kit against
an installed provider, each in a process the kit controls (see
:mod:`dsh_contract_tests.verify`).
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
    check = commands.add_parser(
        "verify",
        help="run every rule against an installed provider, each in a process the kit controls",
        description="Run every rule of the kit against an installed provider, each rule in "
        "a pytest process of its own with the kit's own test module and configuration "
        "(none of the project's conftest, addopts, PYTEST_ADDOPTS or plugins). Ends with "
        "one summary line; exit status 0 only when every rule ran and passed.",
    )
    check.add_argument(
        "provider",
        metavar="PROVIDER",
        help="an entry-point name in the dsh.subagent.providers group, or module:Class",
    )
    check.add_argument("--report", type=Path, metavar="FILE", help="write the JSON report here")
    check.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="what the provider needs (a .toml or JSON verify profile): a loopback model "
        "fixture, Config values, env variables, hold and settle timeouts",
    )
    check.add_argument(
        "--settle-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds each provider call may take (default: the kit's 60; at most 120)",
    )
    check.add_argument(
        "--rule",
        action="append",
        metavar="ID",
        help="run only this rule (repeatable): the verdict is then PARTIAL, never a pass",
    )
    args = parser.parse_args(argv)
    if args.command == "verify":
        return _verify(args)
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


def _verify(args: argparse.Namespace) -> int:
    from dsh_contract_tests.verify import (
        VerifyError,
        read_profile,
        resolve,
        run_verify,
        summary_line,
    )

    try:
        profile = None if args.config is None else read_profile(args.config)
        provider = resolve(args.provider)
        report = run_verify(
            provider, settle_timeout=args.settle_timeout, only=args.rule, profile=profile
        )
    except VerifyError as exc:
        print(f"dsh_contract_tests verify: {exc}", file=sys.stderr)
        return 2
    for rule in report.rules:
        detail = f": {rule.detail}" if rule.detail else ""
        print(f"{rule.outcome:<11} {rule.id}{detail}")
    if args.report is not None:
        args.report.write_text(report.to_json() + "\n", encoding="utf-8")
    print(summary_line(report))
    return 0 if report.verdict == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
