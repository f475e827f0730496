"""The README's confinement example runs as written (documentation that can rot)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from dsh_subprocess import landlock_abi

README = Path(__file__).resolve().parent.parent / "README.md"


def _example(heading: str) -> str:
    body = README.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", body, re.DOTALL)
    assert match is not None
    return match.group(1)


@pytest.mark.skipif(landlock_abi() < 4, reason="needs Landlock ABI 4 (Linux 6.7 or later)")
def test_the_confinement_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PLANTED PRIVATE KEY\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the example's mkdtemp()
    namespace: dict[str, object] = {"__name__": "subprocess_readme_example"}
    exec(compile(_example("## Confinement (Linux: Landlock)"), str(README), "exec"), namespace)
    assert namespace["output"] == b""  # the key was not readable
    work = namespace["work"]
    assert isinstance(work, str)
    assert (Path(work) / "out.txt").read_text() == "written\n"
    printed = capsys.readouterr().out
    assert "Permission denied" in printed
    assert "PLANTED" not in printed
    assert "enforced=True" in printed
