"""Check every built distribution in ``dist/``, then install and import each one alone.

Run after ``python scripts/release_set.py build dist``. ``dist`` must hold exactly the
release set (one wheel and one sdist per distribution). For each wheel:

* it ships ``py.typed`` for its import package and a non-empty README description;
* a fresh virtual environment receives only that wheel plus the wheels of the
  workspace distributions it declares (its transitive ``dsh-*`` requirements, taken
  from the wheel's own metadata, never from the workspace); third-party requirements
  come from the package index;
* ``python -I -c "import <package>"`` succeeds there, from an empty directory, so
  nothing from the checkout can leak onto ``sys.path``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

_REQ_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata(wheel: Path) -> tuple[str, list[str], str]:
    with zipfile.ZipFile(wheel) as archive:
        meta_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(archive.read(meta_name).decode())
        names = archive.namelist()
    name = _normalise(meta["Name"])
    requires = []
    for req in meta.get_all("Requires-Dist") or []:
        if "extra ==" in req:
            continue
        match = _REQ_NAME.match(req)
        if match:
            requires.append(_normalise(match.group(1)))
    packages = {n.split("/")[0] for n in names if n.endswith("/py.typed")}
    if len(packages) != 1:
        raise SystemExit(f"{wheel.name}: expected exactly one py.typed package, found {packages}")
    if not (meta.get_payload() or "").strip():
        raise SystemExit(f"{wheel.name}: empty long description (README)")
    return name, requires, packages.pop()


def main(dist_dir: str = "dist") -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import release_set

    problems = release_set.check(Path(dist_dir))
    if problems:
        raise SystemExit("not the release set:\n" + "\n".join(problems))
    wheels = sorted(Path(dist_dir).glob("*.whl"))
    if not wheels:
        raise SystemExit(f"no wheels in {dist_dir}")
    info = {}
    for wheel in wheels:
        name, requires, package = _metadata(wheel)
        info[name] = (wheel, requires, package)
    for name, (_wheel, _requires, package) in sorted(info.items()):
        closure: list[Path] = []
        pending = [name]
        seen: set[str] = set()
        while pending:
            current = pending.pop()
            if current in seen or current not in info:
                continue
            seen.add(current)
            closure.append(info[current][0].resolve())
            pending.extend(info[current][1])
        with tempfile.TemporaryDirectory(prefix=f"iso-{name}-") as tmp:
            venv = Path(tmp) / "venv"
            subprocess.run(["uv", "venv", "--quiet", str(venv)], check=True)
            python = venv / "bin" / "python"
            subprocess.run(
                ["uv", "pip", "install", "--quiet", "--python", str(python), *map(str, closure)],
                check=True,
            )
            subprocess.run([str(python), "-I", "-c", f"import {package}"], check=True, cwd=tmp)
        print(f"ok  {name}: imports {package} alone ({len(closure)} workspace wheel(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
