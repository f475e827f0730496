"""The workflows can run where they are published, and the release path is the one we mean.

actionlint, as ``./dev lint`` runs it, checks every workflow. The release workflow's
shape is pinned here (docs/versioning.md says how a release is cut): a pushed ``v*`` tag
only; the whole CI first; one build that is checked and then published; the OIDC token
only in the publish job; every release distribution published, the example provider
never; and CI rehearses the publish up to the upload on every pull request.

actionlint comes from the locked dev group as a wheel carrying its binary (nothing is
downloaded when it runs). It knows which runtime each popular action's major version
uses, so an action pinned to a runtime GitHub retires (node20: ``actions/checkout@v4``)
fails the lint before the workflow fails on GitHub.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import release_check
import release_set
import yaml
from fresh_venv import readme_commands

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "ci.yml"
RELEASE = WORKFLOWS / "release.yml"
DEV = ROOT / "dev"


def _actionlint() -> str:
    found = Path(sys.executable).with_name("actionlint")
    assert found.is_file(), "actionlint is not installed in the dev group (uv sync --all-groups)"
    return str(found)


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    # The flags ./dev lint passes: shell and Python checks off (they depend on PATH).
    return subprocess.run(
        [_actionlint(), "-shellcheck=", "-pyflakes=", "-no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_dev_lint_runs_actionlint_over_the_workflows() -> None:
    lint = DEV.read_text(encoding="utf-8")
    assert '"$UV" run --locked actionlint -shellcheck= -pyflakes= .github/workflows/*.yml' in lint


@pytest.mark.parametrize("name", ["ci.yml", "release.yml"])
def test_the_workflow_passes_actionlint(name: str) -> None:
    done = _lint(WORKFLOWS / name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_action_on_a_retired_runtime_fails_the_lint(tmp_path: Path) -> None:
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    old = workflows / "ci.yml"
    shutil.copy(WORKFLOW, old)
    text = re.sub(r"actions/checkout@v\d+", "actions/checkout@v4", old.read_text("utf-8"))
    old.write_text(text, encoding="utf-8")
    done = _lint(old)
    assert done.returncode == 1
    assert 'runtime "node20" is deprecated' in done.stdout
    assert '"actions/checkout@v4"' in done.stdout


def test_the_acp_agents_node_is_a_supported_lts() -> None:
    versions = re.findall(r'node-version: "(\d+)"', WORKFLOW.read_text(encoding="utf-8"))
    assert versions, "no job installs Node"
    for version in versions:  # the main job and the known-agents job
        assert int(version) in {22, 24}  # Maintenance and Active LTS lines (20 reached its end)


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    # YAML 1.1 reads the bare key `on` as the boolean true.
    if True in data:
        data["on"] = data.pop(True)
    return data


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps = job.get("steps", [])
    assert isinstance(steps, list)
    return steps


def _runs(job: dict[str, Any]) -> list[str]:
    return [" ".join(str(s["run"]).split()) for s in _steps(job) if "run" in s]


def _uses(job: dict[str, Any], action: str) -> dict[str, Any]:
    found = [s for s in _steps(job) if str(s.get("uses", "")).startswith(action + "@")]
    assert len(found) == 1, f"{action}: {found}"
    return found[0]


def test_the_release_runs_on_a_pushed_v_tag_and_nothing_else() -> None:
    assert _load(RELEASE)["on"] == {"push": {"tags": ["v*"]}}


def test_the_release_runs_the_whole_ci_first() -> None:
    release = _load(RELEASE)
    assert release["jobs"]["checks"]["uses"] == "./.github/workflows/ci.yml"
    assert "workflow_call" in _load(WORKFLOW)["on"]
    assert set(release["jobs"]["publish"]["needs"]) == {"checks", "build"}


def test_only_the_publish_job_can_mint_an_id_token() -> None:
    for path in (RELEASE, WORKFLOW):
        workflow = _load(path)
        assert workflow["permissions"] == {"contents": "read"}, path.name
        for name, job in workflow["jobs"].items():
            permissions = job.get("permissions", {})
            if (path, name) == (RELEASE, "publish"):
                assert permissions == {
                    "contents": "read",
                    "id-token": "write",
                    "attestations": "write",
                }
            else:
                assert "id-token" not in permissions, f"{path.name}: {name}"


def test_the_publish_job_uses_trusted_publishing_with_attestations() -> None:
    publish = _load(RELEASE)["jobs"]["publish"]
    assert publish["environment"]["name"] == "pypi"
    upload = _uses(publish, "pypa/gh-action-pypi-publish")
    # No password or token input: PyPI trusts the workflow through the OIDC token.
    assert upload["with"] == {"packages-dir": "dist/", "attestations": True}
    provenance = _uses(publish, "actions/attest-build-provenance")
    assert provenance["with"] == {"subject-path": "dist/*"}
    steps = [str(s.get("uses", s.get("name"))) for s in _steps(publish)]
    assert steps.index(provenance["uses"]) < steps.index(upload["uses"])


def test_the_published_files_are_the_checked_build_of_the_release_set() -> None:
    jobs = _load(RELEASE)["jobs"]
    runs = _runs(jobs["build"])
    # The release set's own builder (never `uv build --all-packages`, which would
    # build the example provider), then the checks, in this order, on the same files.
    expected = [
        "uv run --no-project python scripts/release_set.py build dist",
        "uv run --locked --only-group release python scripts/release_check.py version dist"
        ' --tag "$TAG"',
        "uv run --locked --only-group release twine check --strict dist/*",
        "uv run --no-project python .github/workflows/check_dists.py dist",
    ]
    assert runs == expected
    tag_step = next(s for s in _steps(jobs["build"]) if "--tag" in str(s.get("run", "")))
    assert tag_step["env"] == {"TAG": "${{ github.ref_name }}"}
    uploaded = _uses(jobs["build"], "actions/upload-artifact")["with"]
    downloaded = _uses(jobs["publish"], "actions/download-artifact")["with"]
    assert uploaded["name"] == downloaded["name"]
    assert uploaded["path"] == downloaded["path"] == "dist/"
    assert uploaded["if-no-files-found"] == "error"
    text = RELEASE.read_text(encoding="utf-8")
    assert "--all-packages" not in text
    assert "example" not in text.replace("example provider", "")


def _touch_set(dist: Path, names: list[str]) -> Path:
    dist.mkdir()
    for name in names:
        module = name.replace("-", "_")
        for file in (f"{module}-0.1.0-py3-none-any.whl", f"{module}-0.1.0.tar.gz"):
            (dist / file).write_bytes(b"")
    return dist


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        (
            [*release_set.RELEASE_SET, "dsh-example-provider"],
            "not in the release set: dsh-example-provider",
        ),
        ([n for n in release_set.RELEASE_SET if n != "dsh-otel"], "dsh-otel: expected one wheel"),
    ],
)
def test_every_release_distribution_is_published_and_the_example_provider_never(
    tmp_path: Path, names: list[str], problem: str
) -> None:
    # The publish job uploads all of dist/ (no filter), and dist/ is what the build job
    # made and checked: its version step refuses a set with anything missing or extra
    # before a file is read, so the upload is exactly the release set.
    publish = _load(RELEASE)["jobs"]["publish"]
    assert _uses(publish, "pypa/gh-action-pypi-publish")["with"]["packages-dir"] == "dist/"
    dist = _touch_set(tmp_path / "dist", names)
    with pytest.raises(release_check.ReleaseCheckError, match=re.escape(problem)):
        release_check.check_versions(dist, tag="v0.1.0")


def test_ci_rehearses_the_publish_on_every_pull_request() -> None:
    ci = _load(WORKFLOW)
    assert "pull_request" in ci["on"]
    dists = ci["jobs"]["dists"]
    assert dists["if"] == "github.event_name != 'schedule'"
    runs = _runs(dists)
    build = runs.index("uv run --no-project python scripts/release_set.py build dist")
    rehearsal = runs.index(
        "uv run --locked --only-group release python scripts/release_check.py dry-run dist"
    )
    assert build < rehearsal
    assert "uv run --locked --only-group release twine check --strict dist/*" in runs


def test_every_action_is_pinned_to_a_release() -> None:
    # A major tag where the action publishes one, else an exact tag; never a branch
    # (pypa's release/v1 is that action's published release line).
    pinned = re.compile(r"^[\w.-]+/[\w.-]+@(v\d+(\.\d+\.\d+)?|release/v\d+)$")
    for path in (WORKFLOW, RELEASE):
        for name, job in _load(path)["jobs"].items():
            for step in _steps(job):
                if "uses" in step:
                    assert pinned.match(str(step["uses"])), f"{path.name}: {name}: {step['uses']}"


def test_the_documented_rehearsal_is_what_ci_runs_on_every_pull_request() -> None:
    # VERSIONING.md's local rehearsal, line by line, is the dists job (after clearing
    # dist/), so CI runs the block as written on every pull request; running it here too
    # would repeat a build of the whole set and thirteen fresh venvs on a shared machine.
    block = readme_commands((ROOT / "VERSIONING.md").read_text("utf-8"), "rehearse-release")
    lines = [" ".join(line.split()) for line in block.splitlines() if line.strip()]
    assert lines[0] == "rm -rf dist"
    assert lines[1:] == _runs(_load(WORKFLOW)["jobs"]["dists"])


def test_the_changelog_keeps_an_unreleased_section_in_keep_a_changelog_form() -> None:
    # Step 2 of cutting a release renames Unreleased to the version; the kinds of change
    # are Keep a Changelog's six.
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert releases[0] == "[Unreleased]"
    for heading in releases[1:]:
        assert re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", heading), heading
    kinds = set(re.findall(r"^### (.+)$", text, re.MULTILINE))
    assert kinds
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    assert "rename\n   `Unreleased` to `[<version>] - <date>`" in (
        ROOT / "VERSIONING.md"
    ).read_text("utf-8")
