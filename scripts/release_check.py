"""Checks a built release set before it is published, and rehearses the upload.

Run after ``python scripts/release_set.py build DIST_DIR`` (docs/versioning.md):

``python scripts/release_check.py version DIST_DIR [--tag TAG]``
    Every file in ``DIST_DIR`` carries one lockstep version, which is printed; every
    requirement on a sibling distribution pins it exactly (``==``); the metadata an index
    needs agrees with each file name (name, version, normalised sdist name, PEP 625), and
    no file is marked ``Private :: Do Not Upload``. With ``--tag`` the tag must be
    ``v<version>``: the release workflow passes the pushed tag.

``python scripts/release_check.py dry-run DIST_DIR``
    The version checks, then ``twine upload`` of the whole set (the uploader the publish
    action runs) to an index on loopback that accepts the upload protocol and checks
    each upload's form against its file (digest, name, version, file type). It fails
    unless every release distribution arrived as one wheel and one sdist and nothing else
    did. The token exchange with PyPI (trusted publishing) is the one step it cannot
    rehearse: it needs the OIDC token GitHub mints only for the publish job.

Needs ``twine`` for ``dry-run`` (the ``release`` dependency group).
"""

from __future__ import annotations

import argparse
import email.parser
import email.policy
import hashlib
import http.server
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import release_set  # a sibling script, not an installed module

_SIBLING_PIN = re.compile(r"^(dsh[-_.][A-Za-z0-9._-]+)\s*(?:\[[^\]]*\])?\s*([^;]*)")
_MAX_UPLOAD = 64 * 1024 * 1024  # the loopback index refuses bodies past this


class ReleaseCheckError(Exception):
    """The set is not fit to publish; the message names the file and the field."""


@dataclass(frozen=True)
class Built:
    """One file of the set, as an index sees it."""

    path: Path
    name: str
    version: str
    filetype: str  # "bdist_wheel" or "sdist", the upload form's names
    metadata: Message


def _read_metadata(path: Path) -> Message:
    try:
        raw = _raw(path)
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        kind = type(exc).__name__
        raise ReleaseCheckError(f"{path.name}: not a readable archive ({kind}: {exc})") from None
    if raw is None:
        raise ReleaseCheckError(f"{path.name}: holds no METADATA / PKG-INFO")
    return email.parser.BytesParser(policy=email.policy.compat32).parsebytes(raw)


def _raw(path: Path) -> bytes | None:
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            return archive.read(names[0]) if len(names) == 1 else None
    with tarfile.open(path) as archive:
        members = [
            m
            for m in archive.getmembers()
            if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO") and m.isfile()
        ]
        extracted = archive.extractfile(members[0]) if len(members) == 1 else None
        return extracted.read() if extracted is not None else None


def inspect(path: Path) -> Built:
    """Name, version and type from the file name, checked against the file's metadata."""
    try:
        if path.name.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(path.name)
            filetype = "bdist_wheel"
        elif path.name.endswith(".tar.gz"):
            name, version = parse_sdist_filename(path.name)
            filetype = "sdist"
        else:
            raise ReleaseCheckError(f"{path.name}: neither a wheel nor an sdist")
    except (InvalidWheelFilename, InvalidSdistFilename) as exc:
        raise ReleaseCheckError(f"{path.name}: invalid file name ({exc})") from None
    metadata = _read_metadata(path)
    meta_name, meta_version = metadata["Name"], metadata["Version"]
    if canonicalize_name(meta_name or "") != name:
        raise ReleaseCheckError(f"{path.name}: metadata Name {meta_name!r} is not {name!r}")
    if meta_version != str(version):
        raise ReleaseCheckError(f"{path.name}: metadata Version {meta_version!r} is not {version}")
    if filetype == "sdist":
        # PyPI accepts only normalised sdist names (PEP 625): underscores, lower case.
        expected = f"{name.replace('-', '_')}-{version}.tar.gz"
        if path.name != expected:
            raise ReleaseCheckError(f"{path.name}: sdist name is not normalised ({expected})")
    if "Private :: Do Not Upload" in (metadata.get_all("Classifier") or []):
        raise ReleaseCheckError(f"{path.name}: marked Private :: Do Not Upload")
    return Built(path, name, str(version), filetype, metadata)


def check_versions(dist_dir: Path, tag: str | None = None) -> str:
    """The one lockstep version of the set in ``dist_dir`` (and the tag, when given)."""
    if not dist_dir.is_dir():
        raise ReleaseCheckError(f"{dist_dir}: not a directory (build the set into it first)")
    problems = release_set.check(dist_dir)
    if problems:
        raise ReleaseCheckError("not the release set: " + "; ".join(problems))
    built = [inspect(p) for p in sorted(dist_dir.iterdir()) if not p.name.startswith(".")]
    versions = {b.version for b in built}
    if len(versions) != 1:
        listing = ", ".join(f"{b.path.name}={b.version}" for b in built)
        raise ReleaseCheckError(f"versions are not in lockstep: {listing}")
    (version,) = versions
    for b in built:
        for requirement in b.metadata.get_all("Requires-Dist") or []:
            match = _SIBLING_PIN.match(requirement)
            if match is None:
                continue
            sibling, spec = canonicalize_name(match.group(1)), match.group(2).strip()
            if sibling in release_set.RELEASE_SET and spec != f"=={version}":
                raise ReleaseCheckError(
                    f"{b.path.name}: Requires-Dist {requirement!r} does not pin "
                    f"{sibling}=={version}"
                )
    if tag is not None and tag != f"v{version}":
        raise ReleaseCheckError(f"tag {tag!r} is not the release version v{version}")
    return version


@dataclass(frozen=True)
class Upload:
    name: str
    version: str
    filetype: str
    filename: str
    sha256: str


class _Index(http.server.ThreadingHTTPServer):
    uploads: list[Upload]
    refused: list[str]


class _UploadHandler(http.server.BaseHTTPRequestHandler):
    server: _Index

    def log_message(self, format: str, *args: object) -> None:
        pass  # the dry run reports what arrived; request lines would be noise

    def do_POST(self) -> None:  # the legacy upload API that twine speaks
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_UPLOAD:
            self._answer(413, "too large")
            return
        body = self.rfile.read(length)
        head = f"Content-Type: {self.headers.get('Content-Type', '')}\r\n\r\n".encode()
        form = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
        fields: dict[str, str] = {}
        content = b""
        filename = ""
        for part in form.iter_parts():
            field = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if not isinstance(field, str) or not isinstance(payload, bytes):
                continue
            if field == "content":
                content, filename = payload, str(part.get_filename() or "")
            else:
                fields[field] = payload.decode()
        problem = self._problem(fields, content, filename)
        if problem:
            self.server.refused.append(f"{filename or '?'}: {problem}")
            self._answer(400, problem)
            return
        self.server.uploads.append(
            Upload(
                canonicalize_name(fields["name"]),
                fields["version"],
                fields["filetype"],
                filename,
                fields["sha256_digest"],
            )
        )
        self._answer(200, "OK")

    @staticmethod
    def _problem(fields: dict[str, str], content: bytes, filename: str) -> str | None:
        if fields.get(":action") != "file_upload" or fields.get("protocol_version") != "1":
            return "not a file_upload of protocol 1"
        for required in ("name", "version", "filetype", "metadata_version", "sha256_digest"):
            if not fields.get(required):
                return f"missing form field {required}"
        if hashlib.sha256(content).hexdigest() != fields["sha256_digest"]:
            return "sha256_digest does not match the content"
        try:
            built = inspect_bytes(filename, content)
        except ReleaseCheckError as exc:
            return str(exc)
        if (built.name, built.version, built.filetype) != (
            canonicalize_name(fields["name"]),
            fields["version"],
            fields["filetype"],
        ):
            return "form name/version/filetype disagree with the file"
        return None

    def _answer(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def inspect_bytes(filename: str, content: bytes) -> Built:
    """:func:`inspect` for an uploaded file (kept in memory by the loopback index)."""
    if "/" in filename or filename.startswith("."):
        raise ReleaseCheckError(f"{filename!r}: not a plain file name")
    with tempfile.TemporaryDirectory(prefix="dsh-upload-") as tmp:
        path = Path(tmp) / filename
        path.write_bytes(content)
        return inspect(path)


@contextmanager
def loopback_index() -> Iterator[_Index]:
    """An index on 127.0.0.1 that records what is uploaded to it."""
    server = _Index(("127.0.0.1", 0), _UploadHandler)
    server.uploads, server.refused = [], []
    thread = threading.Thread(target=server.serve_forever, name="loopback-index", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def dry_run(dist_dir: Path) -> list[Upload]:
    """Upload the checked set with twine to a loopback index; what arrived, checked."""
    version = check_versions(dist_dir)
    files = sorted(str(p) for p in dist_dir.iterdir() if not p.name.startswith("."))
    with loopback_index() as index:
        url = f"http://127.0.0.1:{index.server_address[1]}/legacy/"
        env = {
            **os.environ,
            # A throwaway token: the loopback index accepts any; nothing is stored.
            "TWINE_USERNAME": "__token__",
            "TWINE_PASSWORD": "dry-run",
            "TWINE_NON_INTERACTIVE": "1",
        }
        done = subprocess.run(
            [sys.executable, "-m", "twine", "upload", "--repository-url", url, *files],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            refused = "; ".join(index.refused)
            raise ReleaseCheckError(
                f"twine upload failed ({done.returncode}): "
                + (refused or (done.stdout + done.stderr).strip()[-2000:])
            )
        uploads = list(index.uploads)
    arrived: dict[str, list[str]] = {}
    for upload in uploads:
        if upload.version != version:
            raise ReleaseCheckError(f"{upload.filename}: uploaded as version {upload.version}")
        arrived.setdefault(upload.name, []).append(upload.filetype)
    expected = {name: ["bdist_wheel", "sdist"] for name in release_set.RELEASE_SET}
    if {name: sorted(kinds) for name, kinds in arrived.items()} != expected:
        raise ReleaseCheckError(f"the index received {arrived}, not the release set")
    return uploads


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="release_check.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    version = sub.add_parser("version", help="print the set's lockstep version, checked")
    version.add_argument("dist_dir", type=Path)
    version.add_argument("--tag", help="the pushed tag, which must be v<version>")
    rehearse = sub.add_parser("dry-run", help="upload the set to a loopback index")
    rehearse.add_argument("dist_dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "version":
            print(check_versions(args.dist_dir, args.tag))
        else:
            uploads = dry_run(args.dist_dir)
            for upload in uploads:
                print(f"uploaded  {upload.filename}  sha256:{upload.sha256[:16]}")
            names = len({u.name for u in uploads})
            print(f"release_check: dry run uploaded {len(uploads)} files of {names} distributions")
    except ReleaseCheckError as exc:
        print(f"release_check: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
