"""The one requirement manifest of the kit: every rule, its id, its tier and its page.

Ids are stable: ``<area>:<rule>``. An id is never reused for a different rule; new ids
arrive only in minor releases. Every kit test carries exactly one id through the
``dsh_requirement`` marker (see :func:`requirement`), and the kit's own test-suite checks
both directions: every id here has a test, and every test names an id listed here.

Each rule is explained, under a heading carrying its id, in ``docs/rules.md`` (the Rules
page of the dsh-python documentation); :attr:`Requirement.doc` points there, and a test
keeps that page and this manifest in agreement.

This module is data, the bottom floor of the kit: it imports nothing of the kit. The
decorator that ties a test to its id, :func:`~dsh_contract_tests.failures.requirement`,
lives with the rule wrapper it applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["REQUIREMENTS", "REQUIREMENT_MARKER", "RULES_PAGE", "Requirement"]

Tier = Literal["keyless", "loader", "credentialed"]

RULES_PAGE: Final = "docs/rules.md"
"""Where every rule is explained: a page of the dsh-python repository and documentation."""

REQUIREMENT_MARKER: Final = "dsh_requirement"
"""Marker naming the manifest requirement id a kit test proves."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One contract rule.

    Attributes:
        id: Stable identifier ``<area>:<rule>``.
        rule: The behaviour the kit test asserts, in one sentence.
        tier: The tier marker its test carries.
    """

    id: str
    rule: str
    tier: Tier = "keyless"

    @property
    def anchor(self) -> str:
        """The id's anchor in :data:`RULES_PAGE`, e.g. ``cwd-parent-session``."""
        return self.id.replace(":", "-")

    @property
    def doc(self) -> str:
        """Where this rule is explained: :data:`RULES_PAGE` ``#`` :attr:`anchor`."""
        return f"{RULES_PAGE}#{self.anchor}"


_ALL: Final = (
    Requirement(
        "capability:refused-before-start",
        "Each request field whose capability flag is false is refused with UNSUPPORTED_CAPABILITY "
        "before start(): no run, no lifecycle event, no process.",
    ),
    Requirement(
        "capability:out-of-process-declares-none",
        "An out-of-process provider (its runs have no local agent) advertises no start capability "
        "(continuation and output_schema aside) and does not inherit the parent context.",
    ),
    Requirement(
        "cwd:parent-session",
        "Without a configured override the child process runs in the parent session cwd, not in "
        "the host process cwd.",
    ),
    Requirement(
        "cwd:override-wins",
        "A configured cwd override wins over the parent session cwd; a provider without an "
        "override refuses the key at load instead of ignoring it.",
    ),
    Requirement(
        "cwd:missing-is-loud",
        "With neither an override nor a parent cwd, start() fails loudly before any process "
        "starts; the host process cwd is never used.",
    ),
    Requirement(
        "env:credential-scrubbed",
        "A credential planted in the parent environment does not reach any process of the run's "
        "tree.",
    ),
    Requirement(
        "env:overlay-reaches-child",
        "A variable layered explicitly through the provider's env configuration reaches the "
        "child, even when it is credential-shaped.",
    ),
    Requirement(
        "settlement:completed",
        "A child that answers settles completed with exactly its answer and no diagnostic.",
    ),
    Requirement(
        "settlement:result-never-raises",
        "After publication result() never raises: a failing child settles as a result (error), "
        "and every call returns the same value.",
    ),
    Requirement(
        "settlement:cancel-before-start",
        "A request whose signal is already aborted makes start() raise: no run, no lifecycle "
        "event, no process left.",
    ),
    Requirement(
        "settlement:cancel-during-start",
        "Cancellation while start() is in progress either rolls back (start raises, no event, no "
        "process) or, if publication won, settles aborted without a diagnostic.",
    ),
    Requirement(
        "settlement:cancel-mid-run",
        "Cancellation of a published, working run settles aborted with no diagnostic.",
    ),
    Requirement(
        "settlement:cancel-after-completion",
        "Cancellation after the run completed leaves the completed result unchanged.",
    ),
    Requirement(
        "diagnostic:fixed-line",
        "A failed run carries a diagnostic whose first line is the fixed product failure line "
        "with its fields in the fixed order and unavailable fields omitted.",
    ),
    Requirement(
        "diagnostic:bounded",
        "Every diagnostic is at most 4096 UTF-8 bytes and truncation never splits a character.",
    ),
    Requirement(
        "diagnostic:no-planted-secret",
        "No planted secret (task text, path, env value, stderr line, raw error) appears in the "
        "diagnostic, the output or a lifecycle event (hypothesis-generated secrets).",
    ),
    Requirement(
        "quiescence:after-dispose",
        "When dispose() returns, no process of the run's tree is alive.",
    ),
    Requirement(
        "quiescence:after-cancel-any-phase",
        "After cancellation at any phase (before start, during start, mid-run, after completion) "
        "and the consumer's dispose, no process of the run's tree is alive.",
    ),
    Requirement(
        "quiescence:dispose-idempotent",
        "Repeated and concurrent dispose() calls share one teardown: all return after whole-tree "
        "exit and none raises.",
    ),
    Requirement(
        "lifecycle:paired",
        "Every published run gets exactly one subagent/start and exactly one subagent/end with "
        "the same run id, start first.",
    ),
    Requirement(
        "lifecycle:calls-return",
        "start(), result() and dispose() each return within the kit's settle timeout, and the "
        "service's exit too: no call ignores its caller's cancellation or blocks it forever.",
    ),
    Requirement(
        "concurrency:independent-runs",
        "N parallel runs of one provider instance settle independently: cancelling one does not "
        "disturb the others' answers.",
    ),
    Requirement(
        "continuation:flag-honest",
        "A provider declaring the continuation capability puts a continuation handle naming "
        "itself on a completed result; one not declaring it puts none.",
    ),
    Requirement(
        "continuation:sees-earlier-turn",
        "A run started with an earlier result's continuation handle is a new run whose product "
        "sees the earlier turn, after the earlier run's whole tree has exited.",
    ),
    Requirement(
        "continuation:refused",
        "A handle of another provider instance, or naming a session the product does not have, "
        "is refused before publication with CONTINUATION_UNAVAILABLE and the fixed line: no "
        "lifecycle event, and no process left.",
    ),
    Requirement(
        "output:refused-before-start",
        "A request with an output_schema is refused before start(): with UNSUPPORTED_CAPABILITY "
        "by a provider not declaring the output_schema capability, with INVALID_REQUEST for a "
        "schema that is not object-rooted; no run, no lifecycle event, no process.",
    ),
    Requirement(
        "output:flag-honest",
        "A provider declaring the output_schema capability hands the schema to its product: "
        "the same directive is answered in the schema's form only when the request carries one, "
        "and a request without one completes exactly as before (no structured value).",
    ),
    Requirement(
        "output:conforming-yields-object",
        "With an output_schema, an answer that matches it completes with structured set to the "
        "validated object (a model instance for a model class), the answer text kept.",
    ),
    Requirement(
        "output:nonconforming-fails",
        "With an output_schema, an answer that does not match it settles error with category "
        "output-invalid, no structured value, a bounded diagnostic without the answer, and no "
        "process left.",
    ),
    Requirement(
        "ready:one-delegation-per-product",
        "A provider offering ready starts serves each delegation on its own ready product: "
        "two delegations claim two different products, each tree gone once its run is "
        "disposed.",
    ),
    Requirement(
        "ready:indistinguishable",
        "A delegation on a ready product settles like one on a cold start: the same stop "
        "reason, diagnostic, usage presence and progress kinds.",
    ),
    Requirement(
        "ready:never-fails-a-delegation",
        "A ready product that died while idle is never claimed: the next delegation starts "
        "cold, completes, and the fallback is counted.",
    ),
    Requirement(
        "ready:close-leaves-nothing",
        "Closing the service ends every ready product's whole tree.",
    ),
    Requirement(
        "confinement:applied",
        "dsh confines the provider's runs: it has a policy for them (the product spawns "
        "through dsh-subprocess, confinement not off) and every process of a run carries "
        "it; a provider it cannot confine is reported NOT confined, never passed.",
    ),
    Requirement(
        "confinement:reads-only-its-reach",
        "A run told by its model to read a key planted under the host's ~/.ssh is refused by "
        "the kernel, settles, and the key's text reaches neither its answer nor its "
        "diagnostic.",
    ),
    Requirement(
        "confinement:writes-only-its-reach",
        "A run told by its model to write a file into the host's home is refused by the "
        "kernel, settles, and no file appears there.",
    ),
    Requirement(
        "confinement:connects-only-allowed-ports",
        "A run told by its model to connect to a loopback port that is not its model's is "
        "refused by the kernel, settles, and nothing reaches that port.",
    ),
    Requirement(
        "loader:entry-point-starts-nothing",
        "The provider loads from its dsh.subagent.providers entry point, validates its Config and "
        "is constructed with an empty PATH without starting any process.",
        tier="loader",
    ),
    Requirement(
        "credentialed:unique-answer",
        "Against the real DeepSeek service the provider returns a unique nonce as the complete "
        "answer and leaves no process; self-skips without DEEPSEEK_API_KEY.",
        tier="credentialed",
    ),
    Requirement(
        "kit:no-silent-opt-out",
        "Every kit test is present on the provider's test class; an override carries "
        "xfail(strict=True, reason=...) and still runs the kit's rule through super().",
    ),
)

REQUIREMENTS: Final[Mapping[str, Requirement]] = {req.id: req for req in _ALL}
"""Every requirement id of the kit, in manifest order."""
