"""Third-party notices and the fail-closed runtime license policy.

Reads ``uv.lock`` for the runtime dependency closure of every published distribution and
the installed metadata of each dependency for its declared license, then either writes
``THIRD_PARTY_NOTICES.md`` or (``--check``) fails when the committed file is stale or a
runtime dependency's license is non-permissive or unknown.

Policy (seed 004): runtime dependencies must be permissive, except the explicitly
authorised product identities, whose bundled payloads are disclosed with their declared
terms and never reclassified as permissive. A dependency whose metadata declares no
license passes only through a reviewed entry in ``scripts/license-reviews.toml`` pinned
to its exact version, so a version bump re-opens the review. Test-only and dev
dependencies are listed separately and not gated.

Usage: ``python scripts/notices.py`` (write) or ``python scripts/notices.py --check``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression

ROOT = Path(__file__).resolve().parent.parent
NOTICES = ROOT / "THIRD_PARTY_NOTICES.md"
REVIEWS = ROOT / "scripts" / "license-reviews.toml"

# Distributions we publish; the workspace root and the example provider are not published.
UNPUBLISHED = frozenset({"dsh-workspace", "dsh-example-provider"})

PERMISSIVE = frozenset(
    {
        "0BSD", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "MIT", "MIT-0",
        "PSF-2.0", "Python-2.0", "Unlicense", "Zlib",
    }
)  # fmt: skip
# File-level copyleft used unmodified as a library (hypothesis, in the contract kit) is
# accepted deliberately; strong copyleft and anything unknown fail closed.
ACCEPTED_WEAK_COPYLEFT = frozenset({"MPL-2.0"})

# Trove classifiers that name exactly one SPDX license; "BSD License" names none.
CLASSIFIER_SPDX = {
    "License :: OSI Approved :: MIT License": "MIT",
    "License :: OSI Approved :: Apache Software License": "Apache-2.0",
    "License :: OSI Approved :: ISC License (ISCL)": "ISC",
    "License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "License :: OSI Approved :: Python Software Foundation License": "PSF-2.0",
}


@dataclass(frozen=True)
class Payload:
    """A non-Python binary an authorised product distribution ships."""

    path: str
    what: str
    terms: str


@dataclass(frozen=True)
class AuthorisedProduct:
    """A product identity the owner authorised despite non-permissive payload terms."""

    name: str
    payloads: tuple[Payload, ...]


AUTHORISED: Mapping[str, AuthorisedProduct] = {
    "claude-agent-sdk": AuthorisedProduct(
        "claude-agent-sdk",
        (
            Payload(
                "claude_agent_sdk/_bundled/claude",
                "Claude Code CLI (native, version in claude_agent_sdk/_bundled/claude.version)",
                "Anthropic's proprietary terms for Claude Code (© Anthropic PBC, use subject to "
                "Anthropic's Commercial Terms of Service); NOT covered by the SDK's MIT license",
            ),
        ),
    ),
    "openai-codex-cli-bin": AuthorisedProduct(
        "openai-codex-cli-bin",
        (
            Payload("codex_cli_bin/bin/codex", "Codex CLI native binary", "Apache-2.0"),
            Payload("codex_cli_bin/bin/codex-code-mode-host", "Codex code-mode host", "Apache-2.0"),
            Payload("codex_cli_bin/codex-path/rg", "ripgrep", "MIT OR Unlicense"),
            Payload(
                "codex_cli_bin/codex-resources/bwrap",
                "bubblewrap sandbox helper",
                "LGPL-2.0-or-later",
            ),
        ),
    ),
}


class PolicyError(Exception):
    """Raised by ``--check`` when the notices are stale or a license is not allowed."""


@dataclass(frozen=True)
class LicenseFact:
    """A dependency's license as declared, and where the declaration came from."""

    expression: str | None
    source: str


@dataclass
class Dependency:
    """One locked third-party package and who pulls it in."""

    name: str
    version: str
    runtime_of: set[str] = field(default_factory=set)
    dev_only: bool = False


MetadataLookup = Callable[[str], Mapping[str, object] | None]
PayloadLookup = Callable[[str], frozenset[str] | None]

# Installed files that are never payload binaries.
_NOT_PAYLOAD_SUFFIXES = (".py", ".pyi", ".pyc", ".typed", ".json", ".txt", ".md", ".version")


def _installed_payloads(name: str) -> frozenset[str] | None:
    """Executable non-Python files an installed distribution ships (its payload set)."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    found = set()
    for file in dist.files or ():
        path = str(file)
        if ".dist-info/" in path or path.endswith(_NOT_PAYLOAD_SUFFIXES):
            continue
        located = Path(str(file.locate()))
        if located.is_file() and located.stat().st_mode & 0o111:
            found.add(path)
    return frozenset(found)


def _installed_metadata(name: str) -> Mapping[str, object] | None:
    try:
        meta = importlib.metadata.metadata(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    # get_all, not indexing: on Python 3.12+ indexing a missing header warns (and will raise).
    expression, license_text = (
        meta.get_all(key) or [None] for key in ("License-Expression", "License")
    )
    return {
        "License-Expression": expression[0],
        "License": license_text[0],
        "Classifier": meta.get_all("Classifier") or [],
    }


def _canonical(expression: str) -> str | None:
    try:
        return str(canonicalize_license_expression(expression))
    except InvalidLicenseExpression:
        return None


def license_fact(
    name: str, version: str, meta: Mapping[str, object] | None, reviews: Mapping[str, object]
) -> LicenseFact:
    """Determine the declared license of ``name``; ``expression`` is None when unknown."""
    review = reviews.get(name)
    if isinstance(review, dict) and review.get("version") == version:
        expr = _canonical(str(review["expression"]))
        return LicenseFact(expr, f"reviewed: {review['evidence']}")
    if meta is None:
        return LicenseFact(None, "not installed")
    declared = meta.get("License-Expression")
    if isinstance(declared, str) and declared.strip():
        return LicenseFact(_canonical(declared), "License-Expression")
    field_value = meta.get("License")
    if isinstance(field_value, str) and field_value.strip() and "\n" not in field_value:
        expr = _canonical(field_value)
        if expr is not None:
            return LicenseFact(expr, "License field")
    classifiers = meta.get("Classifier")
    if isinstance(classifiers, list):
        ids = sorted({CLASSIFIER_SPDX[c] for c in classifiers if c in CLASSIFIER_SPDX})
        if ids:
            return LicenseFact(" OR ".join(ids), "classifiers")
    return LicenseFact(None, "no license metadata")


_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def expression_allowed(expression: str, allowed: frozenset[str]) -> bool:
    """Evaluate an SPDX expression: OR needs one allowed side, AND needs both."""
    tokens = _TOKEN.findall(expression)
    pos = 0

    def parse_or() -> bool:
        nonlocal pos
        value = parse_and()
        while pos < len(tokens) and tokens[pos] == "OR":
            pos += 1
            right = parse_and()
            value = value or right
        return value

    def parse_and() -> bool:
        nonlocal pos
        value = parse_atom()
        while pos < len(tokens) and tokens[pos] == "AND":
            pos += 1
            right = parse_atom()
            value = value and right
        return value

    def parse_atom() -> bool:
        nonlocal pos
        token = tokens[pos]
        pos += 1
        if token == "(":
            value = parse_or()
            pos += 1  # ")"
            return value
        if pos < len(tokens) and tokens[pos] == "WITH":
            pos += 2  # an exception only widens what the license permits
        return token in allowed

    return parse_or()


def _dep_names(entries: Iterable[Mapping[str, object]]) -> list[str]:
    return [str(entry["name"]) for entry in entries]


def locked_dependencies(lock_text: str) -> dict[str, Dependency]:
    """Third-party packages of the lock, with the published distributions that need them."""
    lock = tomllib.loads(lock_text)
    packages = {str(p["name"]): p for p in lock["package"]}
    members = set(lock["manifest"]["members"])
    deps: dict[str, Dependency] = {}

    def edges(name: str) -> list[str]:
        pkg = packages.get(name, {})
        out = _dep_names(pkg.get("dependencies", []))
        for extra_deps in pkg.get("optional-dependencies", {}).values():
            out += _dep_names(extra_deps)
        return out

    for member in sorted(members - UNPUBLISHED):
        seen: set[str] = set()
        stack = edges(member)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            stack.extend(edges(name))
            if name in members:
                continue
            dep = deps.setdefault(name, Dependency(name, str(packages[name]["version"])))
            dep.runtime_of.add(member)

    # Everything else in the lock is reachable only from dev groups or unpublished members.
    for name, pkg in packages.items():
        if name not in members and name not in deps:
            deps[name] = Dependency(name, str(pkg["version"]), dev_only=True)
    return deps


@dataclass(frozen=True)
class Report:
    """The generated notices text and any policy violations."""

    text: str
    violations: tuple[str, ...]


def build_report(
    lock_text: str,
    lookup: MetadataLookup = _installed_metadata,
    reviews: Mapping[str, object] | None = None,
    payloads: PayloadLookup = _installed_payloads,
) -> Report:
    """Compute the notices file contents and the license-policy violations."""
    reviews = reviews if reviews is not None else _load_reviews()
    deps = locked_dependencies(lock_text)
    allowed = PERMISSIVE | ACCEPTED_WEAK_COPYLEFT
    violations: list[str] = []
    runtime_rows: list[str] = []
    dev_rows: list[str] = []
    for dep in sorted(deps.values(), key=lambda d: d.name):
        fact = license_fact(dep.name, dep.version, lookup(dep.name), reviews)
        shown = fact.expression or "UNKNOWN"
        if dep.dev_only:
            dev_rows.append(f"| {dep.name} | {dep.version} | {shown} | {fact.source} |")
            continue
        users = ", ".join(sorted(dep.runtime_of))
        status = "permissive"
        if dep.name in AUTHORISED:
            status = "authorised product identity (see payloads)"
        elif fact.expression is None:
            violations.append(f"{dep.name} {dep.version}: license unknown ({fact.source})")
            status = "UNKNOWN"
        elif not expression_allowed(fact.expression, allowed):
            violations.append(f"{dep.name} {dep.version}: {fact.expression} is not permissive")
            status = "NOT ALLOWED"
        elif not expression_allowed(fact.expression, PERMISSIVE):
            status = "weak copyleft, used unmodified"
        runtime_rows.append(
            f"| {dep.name} | {dep.version} | {shown} | {fact.source} | {status} | {users} |"
        )
    for product in AUTHORISED.values():
        if product.name not in deps or deps[product.name].dev_only:
            continue
        declared = frozenset(p.path for p in product.payloads)
        shipped = payloads(product.name)
        if shipped is not None and shipped != declared:
            changed = sorted(shipped ^ declared)
            violations.append(
                f"{product.name}: payload set changed, review required: {', '.join(changed)}"
            )
    payload_rows = [
        f"| {product.name} | `{p.path}` | {p.what} | {p.terms} |"
        for product in AUTHORISED.values()
        if product.name in deps and not deps[product.name].dev_only
        for p in product.payloads
    ]
    text = "\n".join(
        [
            "# Third-party notices",
            "",
            "Generated by `python scripts/notices.py` from `uv.lock` and the installed",
            "package metadata; `.ci/run` fails when this file is stale. Do not edit by hand.",
            "",
            "## Runtime dependencies of the published distributions",
            "",
            "| Package | Version | Declared license | Declared in | Policy | Pulled in by |",
            "|---|---|---|---|---|---|",
            *runtime_rows,
            "",
            "## Product payloads shipped inside authorised distributions",
            "",
            "These binaries carry their own terms. They are disclosed as declared and are not",
            "reclassified as permissive; the owner's authorisation covers only these official",
            "product identities. Version, license-field and payload changes require review.",
            "",
            "| Distribution | Path in the wheel | What | Declared terms |",
            "|---|---|---|---|",
            *payload_rows,
            "",
            "## Test-only and development dependencies (not gated)",
            "",
            "| Package | Version | Declared license | Declared in |",
            "|---|---|---|---|",
            *dev_rows,
            "",
        ]
    )
    return Report(text, tuple(violations))


def _load_reviews() -> dict[str, object]:
    if not REVIEWS.exists():
        return {}
    return dict(tomllib.loads(REVIEWS.read_text(encoding="utf-8")).get("review", {}))


def check(report: Report, committed: str | None) -> None:
    """Raise :class:`PolicyError` for violations or a stale notices file."""
    problems = list(report.violations)
    if committed != report.text:
        problems.append("THIRD_PARTY_NOTICES.md is stale: run `uv run python scripts/notices.py`")
    if problems:
        raise PolicyError("\n".join(problems))


def main(argv: list[str] | None = None) -> int:
    """Write the notices, or check them with ``--check``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail on stale notices or policy")
    args = parser.parse_args(argv)
    report = build_report((ROOT / "uv.lock").read_text(encoding="utf-8"))
    if args.check:
        committed = NOTICES.read_text(encoding="utf-8") if NOTICES.exists() else None
        try:
            check(report, committed)
        except PolicyError as exc:
            print(f"notices: {exc}", file=sys.stderr)
            return 1
        print(f"notices: ok ({report.text.count(chr(10))} lines)")
        return 0
    NOTICES.write_text(report.text, encoding="utf-8")
    for violation in report.violations:
        print(f"notices: policy violation: {violation}", file=sys.stderr)
    return 1 if report.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
