"""The checks before a release is published, and the upload rehearsal CI runs on every PR.

The sets here are small hand-made wheels and sdists with real metadata, one per release
distribution, so each wrong property can be made on purpose; CI's dists job runs the
same checks and the dry run on the real built set.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest
import release_check
import release_set


def _metadata(name: str, version: str, requires: list[str], classifiers: list[str]) -> bytes:
    lines = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}"]
    lines += [f"Summary: {name} for tests", "Description-Content-Type: text/markdown"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    lines += [f"Classifier: {c}" for c in classifiers]
    return ("\n".join(lines) + f"\n\n# {name}\n\nA test distribution.\n").encode()


def _write(
    dist: Path,
    name: str,
    version: str = "0.1.0",
    requires: list[str] | None = None,
    classifiers: list[str] | None = None,
    meta_name: str | None = None,
    sdist_stem: str | None = None,
) -> None:
    module = name.replace("-", "_")
    meta = _metadata(meta_name or name, version, requires or [], classifiers or [])
    info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(dist / f"{module}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", "")
        wheel.writestr(f"{info}/METADATA", meta)
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    stem = sdist_stem or f"{module}-{version}"
    with tarfile.open(dist / f"{stem}.tar.gz", "w:gz") as sdist:
        top = tarfile.TarInfo(stem)
        top.type = tarfile.DIRTYPE
        sdist.addfile(top)
        entry = tarfile.TarInfo(f"{stem}/PKG-INFO")
        entry.size = len(meta)
        sdist.addfile(entry, io.BytesIO(meta))


def _release(tmp_path: Path, version: str = "0.1.0") -> Path:
    dist = tmp_path / "dist"
    dist.mkdir()
    for name in release_set.RELEASE_SET:
        requires = [] if name == "dsh-subprocess" else [f"dsh-subprocess=={version}"]
        _write(dist, name, version, requires=[*requires, "anyio>=4.6"])
    return dist


def _replace(dist: Path, name: str, **kwargs: object) -> None:
    module = name.replace("-", "_")
    for old in dist.glob(f"{module}-*"):
        old.unlink()
    _write(dist, name, **kwargs)  # type: ignore[arg-type]


def test_a_lockstep_set_has_one_version_and_takes_its_tag(tmp_path: Path) -> None:
    dist = _release(tmp_path, "1.2.3")
    assert release_check.check_versions(dist) == "1.2.3"
    assert release_check.check_versions(dist, tag="v1.2.3") == "1.2.3"


@pytest.mark.parametrize("tag", ["v1.2.4", "1.2.3", "v1.2.3rc1", "release-1.2.3"])
def test_a_tag_other_than_v_version_is_refused(tmp_path: Path, tag: str) -> None:
    dist = _release(tmp_path, "1.2.3")
    with pytest.raises(release_check.ReleaseCheckError, match=f"tag '{tag}' is not .* v1.2.3"):
        release_check.check_versions(dist, tag=tag)


def test_one_distribution_out_of_step_is_named(tmp_path: Path) -> None:
    dist = _release(tmp_path)
    _replace(dist, "dsh-otel", version="0.1.1")
    with pytest.raises(release_check.ReleaseCheckError, match=r"not in lockstep.*dsh_otel-0\.1\.1"):
        release_check.check_versions(dist)


@pytest.mark.parametrize(
    "requirement",
    ["dsh-subprocess>=0.1.0", "dsh-subprocess==0.1.1", "dsh_subprocess", "dsh-subprocess[x]~=0.1"],
)
def test_a_sibling_requirement_must_pin_the_release_exactly(
    tmp_path: Path, requirement: str
) -> None:
    dist = _release(tmp_path)
    _replace(dist, "dsh-mcp", requires=[requirement])
    with pytest.raises(release_check.ReleaseCheckError, match=r"dsh_mcp-0\.1\.0.*does not pin"):
        release_check.check_versions(dist)


def test_a_sibling_pin_with_an_extra_or_a_marker_is_accepted(tmp_path: Path) -> None:
    dist = _release(tmp_path)
    pins = ['dsh-otel[export]==0.1.0; extra == "otel"', "dsh-subprocess==0.1.0"]
    _replace(dist, "dsh-cli", requires=pins)
    assert release_check.check_versions(dist) == "0.1.0"


def test_a_file_marked_private_is_refused(tmp_path: Path) -> None:
    dist = _release(tmp_path)
    _replace(dist, "dsh-worktree", classifiers=["Private :: Do Not Upload"])
    with pytest.raises(release_check.ReleaseCheckError, match=r"dsh_worktree.*Do Not Upload"):
        release_check.check_versions(dist)


def test_metadata_that_disagrees_with_the_file_name_is_refused(tmp_path: Path) -> None:
    dist = _release(tmp_path)
    _replace(dist, "dsh-otel", meta_name="dsh-telemetry")
    with pytest.raises(release_check.ReleaseCheckError, match="metadata Name 'dsh-telemetry'"):
        release_check.check_versions(dist)


def test_an_unnormalised_sdist_name_is_refused(tmp_path: Path) -> None:
    # PyPI takes only PEP 625 names; `dsh-otel-0.1.0.tar.gz` parses, but is not one.
    dist = _release(tmp_path)
    _replace(dist, "dsh-otel", sdist_stem="dsh-otel-0.1.0")
    with pytest.raises(release_check.ReleaseCheckError, match="sdist name is not normalised"):
        release_check.inspect(dist / "dsh-otel-0.1.0.tar.gz")
    with pytest.raises(release_check.ReleaseCheckError, match=r"dsh-otel-0\.1\.0\.tar\.gz"):
        release_check.check_versions(dist)  # the set check already names the odd file


def test_the_dry_run_uploads_every_release_file_with_twine(tmp_path: Path) -> None:
    dist = _release(tmp_path)
    uploads = release_check.dry_run(dist)
    assert sorted(u.filename for u in uploads) == sorted(p.name for p in dist.iterdir())
    for upload in uploads:
        assert upload.sha256 == hashlib.sha256((dist / upload.filename).read_bytes()).hexdigest()
    assert {u.name for u in uploads} == set(release_set.RELEASE_SET)


def test_the_dry_run_refuses_a_set_with_the_example_provider(tmp_path: Path) -> None:
    dist = _release(tmp_path)
    _write(dist, "dsh-example-provider")
    with pytest.raises(release_check.ReleaseCheckError, match="dsh-example-provider"):
        release_check.dry_run(dist)


def test_the_loopback_index_refuses_a_form_that_disagrees_with_its_file(tmp_path: Path) -> None:
    dist = _release(tmp_path)
    wheel = next(dist.glob("dsh_cli-*.whl"))
    content = wheel.read_bytes()
    fields = {
        ":action": "file_upload",
        "protocol_version": "1",
        "name": "dsh-cli",
        "version": "0.1.0",
        "filetype": "bdist_wheel",
        "metadata_version": "2.4",
        "sha256_digest": hashlib.sha256(content).hexdigest(),
    }
    check = release_check._UploadHandler._problem
    assert check(fields, content, wheel.name) is None
    assert check({**fields, "sha256_digest": "0" * 64}, content, wheel.name) == (
        "sha256_digest does not match the content"
    )
    assert check({**fields, "version": "0.2.0"}, content, wheel.name) == (
        "form name/version/filetype disagree with the file"
    )
    assert check({**fields, "filetype": "sdist"}, content, wheel.name) is not None
    assert check({**fields, ":action": "submit"}, content, wheel.name) is not None
    assert check(fields, content, "../" + wheel.name) is not None


def test_the_command_line_prints_the_version_and_fails_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dist = _release(tmp_path, "2.0.0")
    assert release_check.main(["version", str(dist), "--tag", "v2.0.0"]) == 0
    assert capsys.readouterr().out == "2.0.0\n"
    assert release_check.main(["version", str(dist), "--tag", "v2.0.1"]) == 1
    err = capsys.readouterr().err
    assert err == "release_check: tag 'v2.0.1' is not the release version v2.0.0\n"


def test_a_file_that_is_no_archive_is_named_in_one_line(tmp_path: Path) -> None:
    dist = _release(tmp_path)
    (dist / "dsh_cli-0.1.0-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(
        release_check.ReleaseCheckError,
        match=r"dsh_cli-0\.1\.0-py3-none-any\.whl: not a readable archive",
    ):
        release_check.check_versions(dist)


def test_a_wheel_without_metadata_is_named(tmp_path: Path) -> None:
    dist = _release(tmp_path)
    with zipfile.ZipFile(dist / "dsh_cli-0.1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("dsh_cli/__init__.py", "")
    with pytest.raises(release_check.ReleaseCheckError, match="holds no METADATA"):
        release_check.check_versions(dist)


def test_a_missing_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert release_check.main(["dry-run", str(tmp_path / "dist")]) == 1
    assert capsys.readouterr().err == (
        f"release_check: {tmp_path / 'dist'}: not a directory (build the set into it first)\n"
    )
