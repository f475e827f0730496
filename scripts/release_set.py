"""The release set: exactly the distributions built, checked and published together.

VERSIONING.md names them (lockstep versions, exact sibling pins). The workspace holds
one more member, ``dsh-example-provider`` under ``e2e/``: a copyable third-party
provider that the tests install, never a product distribution, so it is not built or
published with them (its metadata also carries ``Private :: Do Not Upload``, which
package indexes refuse). ``uv build --all-packages`` would build it too; build the
release with this script instead.

Usage: ``python scripts/release_set.py build DIST_DIR`` (needs ``uv`` on PATH) or
``python scripts/release_set.py check DIST_DIR`` (the directory holds exactly one wheel
and one sdist per release distribution, nothing else).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Final

RELEASE_SET: Final = (
    "dsh-subprocess",
    "dsh-subagent",
    "dsh-tool-jobs",
    "dsh-subagent-codex",
    "dsh-subagent-claude-code",
    "dsh-subagent-acp",
    "dsh-worktree",
    "dsh-profiles",
    "dsh-batch",
    "dsh-cli",
    "dsh-pydantic-ai",
    "dsh-openai-agents",
    "dsh-mcp",
    "dsh-otel",
    "dsh-contract-tests",
)
"""Every published distribution, in dependency order."""

NOT_RELEASED: Final = {
    "dsh-example-provider": "the copyable example provider the tests install (e2e/)",
}
"""Workspace members that are never built or published with the release, and why."""

_DIST_NAME = re.compile(r"^([A-Za-z0-9_.]+?)-\d[^-]*(?:-.*\.whl|\.tar\.gz)$")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def built_names(dist_dir: Path) -> dict[str, list[str]]:
    """Distribution name → the files for it in ``dist_dir`` (anything else under ``?``)."""
    found: dict[str, list[str]] = {}
    for path in sorted(dist_dir.iterdir()):
        if path.name.startswith("."):
            continue
        match = _DIST_NAME.match(path.name)
        name = _normalise(match.group(1)) if match else "?"
        found.setdefault(name, []).append(path.name)
    return found


def check(dist_dir: Path) -> list[str]:
    """Problems with ``dist_dir`` as a release: missing, extra or odd files."""
    found = built_names(dist_dir)
    problems = [
        f"not in the release set: {name} ({', '.join(files)})"
        for name, files in found.items()
        if name not in RELEASE_SET
    ]
    for name in RELEASE_SET:
        files = found.get(name, [])
        kinds = sorted("wheel" if f.endswith(".whl") else "sdist" for f in files)
        if kinds != ["sdist", "wheel"]:
            problems.append(f"{name}: expected one wheel and one sdist, found {files or 'none'}")
    return problems


def build(dist_dir: Path) -> None:
    """``uv build`` each release distribution (wheel and sdist) into ``dist_dir``."""
    for name in RELEASE_SET:
        subprocess.run(["uv", "build", "--package", name, "--out-dir", str(dist_dir)], check=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("build", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    dist_dir = Path(argv[1])
    if argv[0] == "build":
        build(dist_dir)
    problems = check(dist_dir)
    for problem in problems:
        print(f"release_set: {problem}", file=sys.stderr)
    if not problems:
        print(f"release_set: {dist_dir} holds exactly the {len(RELEASE_SET)} release distributions")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
