"""The batch engine from outside: built wheels in a clean venv, no dsh-cli.

A Ray user installs ``dsh-batch`` (with ``ray[data]``) and a provider, never the
command line. This builds the wheels of ``dsh-batch``, of exactly the dsh distributions
it depends on and of one provider (``dsh-subagent-codex``, whose pinned Codex binary
comes from the index), installs them with ``pip`` into a new venv and runs docs/batch.md's
``run_batch`` example and Ray Data example verbatim with that venv's Python. The product
is the real Codex against the kit's loopback model fixture, served by the calling process
(the workspace venv), so the clean venv holds no test code.

``uv run --locked python scripts/batch_outside.py [--no-ray]`` prints the evidence;
e2e/test_batch_outside.py runs the same functions in the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from doc_examples import marked, python_block, write_codex_profile
from dsh_contract_tests.fixtures import responses
from dsh_subprocess.testing import become_subreaper, reap_adopted_zombies
from fresh_venv import ROOT, run_bash

__all__ = [
    "BATCH",
    "PROVIDER",
    "Outcome",
    "Router",
    "build_wheels",
    "docs_example",
    "dsh_closure",
    "make_venv",
    "run_example",
]

BATCH = "dsh-batch"
PROVIDER = "dsh-subagent-codex"
PAGE = ROOT / "docs" / "batch.md"
MARKER_NAME = "PROCESS_MARKER_FOR_DSH_BATCH_OUTSIDE"
GONE_WITHIN_SECONDS = 60.0
"""A loose bound for Ray's own shutdown at the script's exit (a loaded 2-core machine)."""
_TIMEOUT = 900  # seconds: a cold download of Ray, or a Ray start on a loaded machine


def _requirements() -> dict[str, list[str]]:
    """Each workspace distribution with the names of its (non-optional) dependencies."""
    found: dict[str, list[str]] = {}
    for pyproject in [
        *ROOT.glob("packages/*/pyproject.toml"),
        ROOT / "contract-tests" / "pyproject.toml",
    ]:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        names = [re.split(r"[\s<>=!~;\[]", dep, maxsplit=1)[0] for dep in project["dependencies"]]
        found[project["name"]] = names
    return found


def dsh_closure(*names: str) -> set[str]:
    """``names`` and every workspace distribution they depend on, transitively."""
    requirements = _requirements()
    todo, seen = list(names), set[str]()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(dep for dep in requirements[name] if dep in requirements)
    return seen


def build_wheels(dist: Path) -> list[str]:
    """Build the batch distribution, its dsh dependencies and the provider into ``dist``."""
    names = sorted(dsh_closure(BATCH, PROVIDER))
    commands = "\n".join(f'uv build --wheel --package {name} -o "{dist}"' for name in names)
    done = run_bash(commands, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return names


def make_venv(venv: Path, dist: Path, *, ray: bool) -> Path:
    """A new venv with every wheel of ``dist``, via pip; with ``ray``, as docs/batch.md
    says for a Ray Data pipeline: ``dsh-batch[ray]`` and ``ray[data]`` from the index."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=_TIMEOUT)
    python = venv / "bin" / "python"
    batch = BATCH.replace("-", "_") + "-"
    wheels = [
        f"{path}[ray]" if ray and path.name.startswith(batch) else str(path)
        for path in sorted(dist.glob("*.whl"))
    ]
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *wheels, *(["ray[data]"] if ray else [])],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def docs_example(heading: str) -> str:
    """The one Python block of the docs/batch.md section that starts with ``heading``."""
    return python_block(PAGE, heading)


@dataclass
class Router:
    """Answers each task by the tag in its text: ``Read issue N`` or ``ROW-TAG T.``."""

    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: responses.RecordedRequest) -> responses.Behaviour | None:
        body = json.dumps(request.body)
        found = re.search(r"Read issue (\d+) in ISSUES|ROW-TAG (\w+)\.", body)
        if found is None:
            return None
        issue, tag = found.groups()
        with self.lock:
            self.seen.append(issue or tag)
        if issue is not None:
            return responses.PlainAnswer(f"FIX-{issue}", "final_answer")
        return responses.PlainAnswer(f"ANSWER-{tag}", "final_answer")


@dataclass
class Outcome:
    """A script's run, the programs its processes ran (each one's ``argv[0]``, sampled
    while it ran) and the processes of the run still there afterwards."""

    done: subprocess.CompletedProcess[str]
    programs: set[str]
    left: list[str]


def run_example(python: Path, code: str, work: Path, root: Path) -> Outcome:
    """Run ``code`` with ``python`` in ``work``, HOME and TMPDIR under ``root``; every
    process of the run carries a marker, and this process is a child subreaper, so what
    the script leaves behind is seen (and then killed)."""
    become_subreaper()
    marker = uuid.uuid4().hex
    dropped = ("PYTEST_", "COV_", "RAY_", "VIRTUAL_ENV", "PYTHONPATH", "UV_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # Ray's agents must start within 15 s
    # Nothing of the workspace on PATH: the run sees the clean venv only.
    path = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if not Path(p).is_relative_to(ROOT))
    # Ray's uv hook fires when ANY ancestor of the driver is `uv run` (this process runs
    # under one): its workers would then run `uv run` in the job's working_dir and find
    # the workspace's Python, not the clean venv. docs/batch.md says such a driver turns
    # the hook off.
    env["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    for name in ("HOME", "TMPDIR"):
        (root / name.lower()).mkdir(exist_ok=True)
        env[name] = str(root / name.lower())
    env[MARKER_NAME] = marker
    programs: set[str] = set()
    finished = threading.Event()

    def sample() -> None:
        while not finished.wait(0.2):
            for proc in marked(MARKER_NAME, marker):
                try:
                    programs.add(proc.cmdline()[0])
                except (psutil.Error, IndexError):
                    continue

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        done = subprocess.run(
            [str(python), "-c", code],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            check=False,
        )
        _, left = psutil.wait_procs(marked(MARKER_NAME, marker), timeout=GONE_WITHIN_SECONDS)
        names = [proc.name() for proc in left]
    finally:
        finished.set()
        sampler.join()
        for proc in marked(MARKER_NAME, marker):
            proc.kill()
        reap_adopted_zombies()
    return Outcome(done, programs, names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray Data example")
    args = parser.parse_args()
    # Short: Ray's unix socket paths under TMPDIR must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="bo-", dir="/tmp"))
    dist, venv = root / "dist", root / "venv"
    print("built:", ", ".join(build_wheels(dist)))
    python = make_venv(venv, dist, ray=not args.no_ray)
    shown = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    )
    print(
        "installed:",
        " ".join(d for d in shown.stdout.split() if d.startswith(("dsh", "ray", "openai-codex"))),
    )
    cli = subprocess.run([str(python), "-c", "import dsh_cli"], capture_output=True, text=True)
    print("import dsh_cli:", cli.returncode, cli.stderr.strip().splitlines()[-1])
    router = Router()
    with responses.ResponsesFixture(route=router) as model:
        work = root / "py"
        work.mkdir()
        (work / "ISSUES.md").write_text("101: a typo\n102: a crash\n", encoding="utf-8")
        write_codex_profile(work / "profile.toml", root / "py-env", model.base_url)
        code = docs_example("## From Python: `dsh_batch.run_batch`")
        got = run_example(python, code, work, root / "py-env")
        print(f"run_batch example: exit {got.done.returncode}, left {got.left}")
        print("programs:", sorted(got.programs))
        print(got.done.stdout + got.done.stderr, end="")
        print(f"results.jsonl: {(work / 'results.jsonl').read_text()}", end="")
        if not args.no_ray:
            work = root / "rd"
            (work / "batch-files").mkdir(parents=True)
            rows = [
                {"id": t.lower(), "task": f"ROW-TAG {t}. Reply with it."}
                for t in ("R1", "R2", "R3")
            ]
            (work / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            write_codex_profile(
                work / "batch-files" / "profile.toml", root / "rd-env", model.base_url
            )
            code = docs_example("## In a Ray Data pipeline")
            got = run_example(python, code, work, root / "rd-env")
            print(f"Ray Data example: exit {got.done.returncode}, left {got.left}")
            print("programs:", sorted(got.programs))
            print(got.done.stderr[-3000:], end="")
            for path in sorted((work / "results").glob("*.json*")):
                print(f"{path.name}: {path.read_text()}", end="")
    print("model saw:", sorted(router.seen))
    print("workdir:", root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
