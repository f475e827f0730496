"""``python -m dsh_contract_tests verify PROVIDER``: the kit's verdict on an installed provider.

The in-repo ``pytest`` run is the author's development loop: it runs in the author's
process, under the author's configuration, next to the provider's own code, and code in
that process can rewrite anything pytest reports. The verify run is the verdict CI and
any listing of compatible providers trust. This process, the verify parent, never
imports the provider. It writes its own test module (one class on
:class:`~dsh_contract_tests.ProviderContract` whose factory builds the provider from its
``Config``, with what the provider's verify profile asks for: a loopback model fixture,
``Config`` values, env variables; see :mod:`dsh_contract_tests.verify_profile`) and
configuration into a private temporary directory and runs **each rule in
a pytest process of its own**: ``-c`` its own ini, ``--rootdir`` and ``--noconftest`` (none
of the author's configuration or conftest), ``-p no:cacheprovider``, plugin autoload off
with only the kit's plugin loaded (so no xdist), ``PYTEST_ADDOPTS`` and every other
``PYTEST_*`` variable removed, and the kit's default ``settle_timeout`` (at most the cap).

A rule passes only on positive evidence the parent checks itself:

* the kit's rule wrapper wrote ``begin`` and ``end passed`` (or a skip of the kit's own)
  for the rule's test on the child's evidence channel, a pipe descriptor the kit opens
  before any provider code is imported (:mod:`dsh_contract_tests.verify_child`), and
  pytest in that child agrees (exit status 0): a hook that records a pass without running
  the rule, resets the exit status, or rewrites a report, leaves one of them saying no;
* no process of the child's tree outlived it (the parent is a child subreaper and looks);
* a test that ended as the consequence of another rule counts only if that rule's own
  child failed.

A provider's code runs in one rule's process only, so what it does there cannot touch
another rule's verdict. Code that sets out to forge the kit's own records inside the
process (rather than pytest's) is beyond what any in-process check can stop; the parent's
cross-checks make that a deliberate, visible act.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, entry_points, packages_distributions, version
from pathlib import Path
from typing import Any, Final

from dsh_subprocess import testing

from dsh_contract_tests.contract import SETTLE_TIMEOUT_CAP, ProviderContract
from dsh_contract_tests.ledger import expected_ids
from dsh_contract_tests.plugin import VERIFY_CHANNEL_OPTION
from dsh_contract_tests.verify_profile import ProfileError, VerifyProfile, load_profile

__all__ = [
    "GROUP",
    "ResolvedProvider",
    "RuleVerdict",
    "VerifyError",
    "VerifyReport",
    "read_profile",
    "resolve",
    "run_verify",
    "summary_line",
]

GROUP: Final = "dsh.subagent.providers"
KIT: Final = "dsh-contract-tests"
_MODULE_NAME: Final = "test_verify"
_PROFILE: Final = "verify-profile.json"
_CLASS: Final = "TestVerify"
_OUTPUT_KEPT: Final = 4000
"""Characters of a failed rule's pytest output kept in the report (the tail)."""
_CHECK_BOUND: Final = 120.0
"""Seconds the Config check may take (an import on a loaded machine)."""
_DETAIL_KEPT: Final = 500
"""Characters of the Config check's refusal shown (pydantic's messages are short)."""
_CHANNEL_CAP: Final = 1 << 20
"""Bytes of evidence read from one child: a rule writes a few records, each bounded."""
_SPEC: Final = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_CONSEQUENCE: Final = re.compile(r"consequence of (\S+)")


class VerifyError(Exception):
    """The verify run cannot start (unknown provider, bad option); nothing was run."""


@dataclass(frozen=True)
class ResolvedProvider:
    """The provider a verify run checks, found from installed metadata alone."""

    spec: str
    entry_point: str | None
    distribution: str | None
    version: str | None


@dataclass
class RuleVerdict:
    """One rule's outcome: ``passed``, ``skipped`` (by the kit, with ``detail``),
    ``consequence`` (of the failing rule in ``detail``) or ``failed``."""

    id: str
    outcome: str
    detail: str = ""
    cases: list[dict[str, str]] = field(default_factory=list)
    output: str = ""


@dataclass
class VerifyReport:
    """The machine-readable verdict of a verify run."""

    verdict: str
    kit_version: str
    provider: ResolvedProvider
    settle_timeout: float
    rules: list[RuleVerdict]
    profile: VerifyProfile = field(default_factory=VerifyProfile)

    def to_json(self) -> str:
        """The report as JSON (what ``--report`` writes)."""
        data: dict[str, Any] = {
            "verdict": self.verdict,
            "kit": {"distribution": KIT, "version": self.kit_version},
            "provider": asdict(self.provider),
            "settle_timeout": self.settle_timeout,
            "hold_timeout": self.profile.hold_timeout,
            "profile": self.profile.model_dump(mode="json", exclude_defaults=True),
            "rules": [asdict(rule) for rule in self.rules],
        }
        return json.dumps(data, indent=2, ensure_ascii=False)


def _kit_version() -> str:
    try:
        return version(KIT)
    except PackageNotFoundError:
        return "unknown"


def resolve(provider: str) -> ResolvedProvider:
    """Find ``provider`` (an entry-point name in :data:`GROUP` or a ``module:Class`` path)
    and its distribution's version without importing it.

    Raises:
        VerifyError: no such entry point, or not a ``module:Class`` path.
    """
    found = list(entry_points(group=GROUP))
    by_name = [e for e in found if e.name == provider]
    if by_name:
        entry = by_name[0]
        dist = entry.dist
        return ResolvedProvider(
            entry.value,
            entry.name,
            None if dist is None else dist.metadata["Name"],
            None if dist is None else dist.version,
        )
    if not _SPEC.match(provider):
        names = ", ".join(sorted(e.name for e in found)) or "none installed"
        raise VerifyError(
            f"PROVIDER {provider!r} is neither an entry point of the {GROUP} group "
            f"({names}) nor a module:Class path"
        )
    named = next((e.name for e in found if e.value == provider), None)
    top = provider.split(":", 1)[0].split(".", 1)[0]
    dists = packages_distributions().get(top, [])
    dist_name = dists[0] if dists else None
    dist_version = None
    if dist_name is not None:
        try:
            dist_version = version(dist_name)
        except PackageNotFoundError:
            dist_version = None
    return ResolvedProvider(provider, named, dist_name, dist_version)


def read_profile(path: Path) -> VerifyProfile:
    """The verify profile in ``path`` (``--config``), checked before anything runs.

    Raises:
        VerifyError: the file cannot be read or a field is wrong (named).
    """
    try:
        return load_profile(path)
    except ProfileError as exc:
        raise VerifyError(str(exc)) from None


def _rule_tests() -> dict[str, list[str]]:
    """Each requirement id of :class:`ProviderContract` with the names of its tests."""
    tests: dict[str, list[str]] = {req: [] for req in expected_ids(ProviderContract)}
    for name, func in vars(ProviderContract).items():
        if name.startswith("test_") and callable(func):
            for mark in getattr(func, "pytestmark", []):
                if mark.name == "dsh_requirement":
                    tests[str(mark.args[0])].append(name)
    return tests


def _write_project(
    root: Path, provider: ResolvedProvider, settle: float, profile: VerifyProfile
) -> Path:
    (root / _PROFILE).write_text(profile.model_dump_json(), encoding="utf-8")
    module = root / f"{_MODULE_NAME}.py"
    module.write_text(
        "from pathlib import Path\n\n"
        "import pytest\n"
        "from dsh_contract_tests import ProviderContract\n"
        "from dsh_contract_tests.verify_profile import load_profile\n"
        "from dsh_contract_tests.verify_setup import (\n"
        "    config_values,\n"
        "    provider_factory_for,\n"
        "    running_model,\n"
        ")\n\n"
        f"PROFILE = load_profile(Path(__file__).with_name({_PROFILE!r}))\n\n\n"
        f"class {_CLASS}(ProviderContract):\n"
        f"    entry_point_name = {provider.entry_point!r}\n"
        f"    settle_timeout = {settle!r}\n"
        "    hold_timeout = PROFILE.hold_timeout\n"
        "    _model = None\n\n"
        "    @pytest.fixture\n"
        "    def verify_model(self):\n"
        "        with running_model(PROFILE.model) as model:\n"
        "            self._model = model\n"
        "            yield model\n\n"
        "    @pytest.fixture\n"
        "    def provider_factory(self, verify_model):\n"
        f"        return provider_factory_for({provider.spec!r}, PROFILE, verify_model)\n\n"
        "    async def wait_until_holding(self, setup, token):\n"
        "        if self._model is None:\n"
        "            await super().wait_until_holding(setup, token)\n"
        "        else:\n"
        "            await self._model.wait_holding(token)\n\n"
        "    def describe_hold(self, setup, token):\n"
        "        if self._model is None:\n"
        "            return super().describe_hold(setup, token)\n"
        "        return self._model.describe(token)\n\n"
        "    def loader_config(self, setup):\n"
        "        return config_values(PROFILE, self._model, setup)\n",
        encoding="utf-8",
    )
    ini = root / "pytest.ini"
    ini.write_text("[pytest]\naddopts =\n", encoding="utf-8")
    return ini


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.pop("PYTHONSTARTUP", None)
    return env


def _check_config(root: Path, provider: ResolvedProvider) -> None:
    """Refuse to run when the provider's ``Config`` refuses the profile's values.

    The check imports the provider, so it runs in a process of its own (this one never
    imports it); it can only stop the run, never count towards a pass. A check that gives
    no answer (the provider's module ends the process on import, say) stops nothing: the
    rules then run and judge the provider, each under its own id.

    Raises:
        VerifyError: the provider's ``Config`` refuses a value (named).
    """
    result = root / "config-check.json"
    argv = [sys.executable, "-m", "dsh_contract_tests.verify_setup", provider.spec]
    argv += [str(root / _PROFILE), str(result)]
    try:
        subprocess.run(
            argv,
            cwd=root,
            env=_child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_CHECK_BOUND,
            check=False,
            start_new_session=True,
        )
        with result.open("rb") as answer:
            data: object = json.loads(answer.read(_CHANNEL_CAP))
    except (OSError, ValueError, subprocess.TimeoutExpired):
        data = None
    if isinstance(data, dict) and data.get("refusal") is not None:
        raise VerifyError(
            f"{str(data['refusal'])[:_DETAIL_KEPT]} (a value the provider needs goes under "
            "[config] or [env] of a verify profile, --config FILE)"
        )


def _read_all(fd: int, into: bytearray) -> None:
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        if len(into) < _CHANNEL_CAP:
            into.extend(chunk[: _CHANNEL_CAP - len(into)])


@dataclass
class _Child:
    status: int | None
    records: list[dict[str, Any]]
    output: str
    leftovers: list[str]


def _run_rule(root: Path, ini: Path, tests: list[str], bound: float) -> _Child:
    """One rule's pytest process, its evidence, its output, and what it left behind."""
    read_end, write_end = os.pipe()
    evidence = bytearray()
    reader = threading.Thread(target=_read_all, args=(read_end, evidence), daemon=True)
    reader.start()
    log = root / "output.log"
    nodes = [f"{_MODULE_NAME}.py::{_CLASS}::{name}" for name in tests]
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(ini),
        "--rootdir",
        str(root),
        "--noconftest",
        "--basetemp",
        str(root / "tmp"),  # inside the verify run's directory, removed with it
        "-p",
        "no:cacheprovider",
        "-p",
        "dsh_contract_tests.plugin",
        f"{VERIFY_CHANNEL_OPTION}={write_end}",
        "-q",
        "-rA",
        *nodes,
    ]
    watch = testing.ProcessWatch()
    with log.open("wb") as sink:
        child = subprocess.Popen(  # noqa: TID251 - the verify run's own pytest child
            argv,
            cwd=root,
            env=_child_env(),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            pass_fds=(write_end,),
            start_new_session=True,
        )
        os.close(write_end)
        status: int | None
        try:
            status = child.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            status = None
            child.kill()
            child.wait()
    watch.wait_gone(5.0)  # a guard server the child started exits once it is gone
    leftovers = watch.kill_leftovers()
    reader.join(timeout=5.0)
    os.close(read_end)
    records: list[dict[str, Any]] = []
    for line in evidence.decode("ascii", "replace").splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            records.append(parsed)
    data = log.read_bytes()
    output = data[-_OUTPUT_KEPT:].decode("utf-8", "replace")
    log.unlink()
    return _Child(status, records, output, leftovers)


def _first_lines(detail: str) -> str:
    """``<id> — <rule>`` is known from the id: keep the "Observed" part of a message."""
    lines = [ln for ln in detail.splitlines() if ln.strip()]
    observed = next((ln for ln in lines if ln.startswith("Observed: ")), None)
    return observed or (lines[0] if lines else "")


def _judge(req_id: str, child: _Child, bound: float) -> RuleVerdict:
    """One rule's verdict from its child's evidence (consequences resolved later)."""
    verdict = RuleVerdict(req_id, "failed")
    if child.status is None:
        verdict.detail = f"the rule's run did not end within {bound:g} s; the kit killed it"
        return verdict
    collected = [r.get("node") for r in child.records if r.get("event") == "collected"]
    begun = [r.get("node") for r in child.records if r.get("event") == "begin"]
    ends = [r for r in child.records if r.get("event") == "end"]
    verdict.cases = [{"node": str(r.get("node")), "outcome": str(r.get("outcome"))} for r in ends]
    own = [r for r in ends if r.get("id") == req_id]
    if child.leftovers:
        verdict.detail = (
            "processes outlived the rule's run (seen by the verify parent): "
            + "; ".join(child.leftovers)
        )
        return verdict
    failed = next((r for r in own if r.get("outcome") == "failed"), None)
    if failed is not None:
        verdict.detail = _first_lines(str(failed.get("detail", "")))
        return verdict
    # Each collected case began and ended once, under this rule's id.
    ended = [r.get("node") for r in own]
    if (
        not collected
        or sorted(map(str, begun)) != sorted(map(str, collected))
        or sorted(map(str, ended)) != sorted(map(str, collected))
        or len(ends) != len(own)
    ):
        verdict.detail = (
            "no evidence that the kit's rule ran to its end for every case: "
            f"{len(collected)} collected, {len(begun)} begun, {len(own)} ended "
            f"(pytest exit status {child.status})"
        )
        return verdict
    outcomes = {str(r.get("outcome")) for r in own}
    if outcomes - {"passed", "kit-skip", "consequence"}:
        other = next(r for r in own if r.get("outcome") not in ("passed", "kit-skip"))
        verdict.detail = (
            f"the rule did not run: {other.get('outcome')}: "
            f"{_first_lines(str(other.get('detail', '')))}"
        )
        return verdict
    if child.status != 0:
        verdict.detail = (
            f"every case of the rule reported an outcome of its own, but pytest in the "
            f"rule's process exited {child.status} (an error outside the rule, e.g. in a "
            "fixture's teardown)"
        )
        return verdict
    if "consequence" in outcomes:
        record = next(r for r in own if r.get("outcome") == "consequence")
        found = _CONSEQUENCE.search(str(record.get("detail", "")))
        verdict.outcome = "consequence"
        verdict.detail = found.group(1) if found else ""
        return verdict
    if outcomes == {"kit-skip"}:
        verdict.outcome = "skipped"
        verdict.detail = str(own[0].get("detail", "")).removeprefix("Skipped: ")
        return verdict
    verdict.outcome = "passed"
    return verdict


def _resolve_consequences(rules: list[RuleVerdict]) -> None:
    failed = {r.id for r in rules if r.outcome == "failed"}
    for rule in rules:
        if rule.outcome == "consequence" and rule.detail not in failed:
            owner = rule.detail or "an unnamed rule"
            rule.outcome = "failed"
            rule.detail = f"ended as a consequence of {owner}, but that rule's own run did not fail"


def run_verify(
    provider: ResolvedProvider,
    *,
    settle_timeout: float | None = None,
    only: list[str] | None = None,
    profile: VerifyProfile | None = None,
) -> VerifyReport:
    """Run every rule of :class:`ProviderContract` against ``provider``, each in a child.

    ``only`` runs those ids alone: the verdict is then ``partial``, never a pass.
    ``profile`` is what the provider needs (:mod:`dsh_contract_tests.verify_profile`);
    ``settle_timeout`` wins over the profile's, which wins over the kit's default.

    Raises:
        VerifyError: ``settle_timeout`` above the cap, or an unknown id in ``only``.
    """
    profile = profile or VerifyProfile()
    if settle_timeout is None:
        settle_timeout = profile.settle_timeout or ProviderContract.settle_timeout
    if not 0 < settle_timeout <= SETTLE_TIMEOUT_CAP:
        raise VerifyError(
            f"--settle-timeout {settle_timeout:g}: at most {SETTLE_TIMEOUT_CAP:g} seconds"
        )
    tests = _rule_tests()
    chosen = only or list(tests)
    unknown = [req for req in chosen if req not in tests]
    if unknown:
        raise VerifyError(f"--rule: not a rule of the kit: {', '.join(unknown)}")
    testing.become_subreaper()
    bound = max(600.0, 10 * settle_timeout)
    verdicts: list[RuleVerdict] = []
    # No prefix of the kit's own: every path a rule's product sees lies beneath it.
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ini = _write_project(root, provider, settle_timeout, profile)
        _check_config(root, provider)
        for req_id in chosen:
            child = _run_rule(root, ini, tests[req_id], bound)
            verdict = _judge(req_id, child, bound)
            if verdict.outcome == "failed":
                verdict.output = child.output
            verdicts.append(verdict)
    _resolve_consequences(verdicts)
    failed = any(v.outcome == "failed" for v in verdicts)
    outcome = "failed" if failed else ("partial" if only else "passed")
    return VerifyReport(outcome, _kit_version(), provider, settle_timeout, verdicts, profile)


def summary_line(report: VerifyReport) -> str:
    """The one line a verify run ends with."""
    who = report.provider.entry_point or report.provider.spec
    dist = report.provider.distribution or "an unknown distribution"
    made = f"{who} ({dist} {report.provider.version or '?'}, {KIT} {report.kit_version})"
    total = len(report.rules)
    failed = [r.id for r in report.rules if r.outcome == "failed"]
    if failed:
        return (
            f"dsh-contract verify FAILED {made}: {len(failed)} of {total} rules failed: "
            + ", ".join(failed)
        )
    skipped = [r.id for r in report.rules if r.outcome == "skipped"]
    consequences = [r for r in report.rules if r.outcome == "consequence"]
    extra = f", {len(skipped)} skipped by the kit" if skipped else ""
    extra += f", {len(consequences)} consequences" if consequences else ""
    if report.verdict == "partial":
        return f"dsh-contract verify PARTIAL {made}: {total} rules selected{extra}, not a pass"
    return f"dsh-contract verify PASSED {made}: all {total} rules ran{extra}"
