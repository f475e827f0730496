"""Loopback-model routes that answer each request by the kit directive in its body.

A product provider's kit subclass points its product at a loopback fixture built with one
of these as ``route``; the product then completes, fails or holds exactly as the run's
directive asks (see :mod:`dsh_contract_tests.scenario`), so one fixture serves many
concurrent runs that behave differently.
"""

from __future__ import annotations

import json

from dsh_contract_tests.fixtures import loopback, messages, responses
from dsh_contract_tests.scenario import find_directive, recalled_token

__all__ = ["LoopbackDirectiveRoute", "MessagesDirectiveRoute", "ResponsesDirectiveRoute"]

_FIXTURE_ERROR = "fixture error"


class ResponsesDirectiveRoute:
    """``route`` for :class:`~dsh_contract_tests.fixtures.responses.ResponsesFixture`.

    ``complete`` answers the token as the final answer; ``fail`` answers HTTP 500 with
    :attr:`error_text` (set it to the run's planted raw error); ``hold`` holds; ``recall``
    answers the token of the session's earlier ``complete`` turn; a request without a
    directive gets a plain ``ok``.
    """

    def __init__(self) -> None:
        self.error_text = _FIXTURE_ERROR

    def __call__(self, request: responses.RecordedRequest) -> responses.Behaviour:
        body = request.raw_body.decode("utf-8", "replace")
        directive = find_directive(body)
        if directive is None:
            return responses.PlainAnswer("ok")
        if directive.behaviour == "complete":
            return responses.PlainAnswer(directive.token, phase="final_answer")
        if directive.behaviour == "recall":
            return responses.PlainAnswer(recalled_token(body), phase="final_answer")
        if directive.behaviour == "fail":
            return responses.HttpError(500, self.error_text)
        return responses.Hold()


class MessagesDirectiveRoute:
    """``route`` for :class:`~dsh_contract_tests.fixtures.messages.MessagesFixture`.

    Same behaviours as :class:`ResponsesDirectiveRoute`, as Anthropic Messages answers.
    """

    def __init__(self) -> None:
        self.error_text = _FIXTURE_ERROR

    def __call__(self, request: messages.RecordedRequest) -> messages.Behaviour:
        body = json.dumps(request.body, ensure_ascii=False)
        directive = find_directive(body)
        if directive is None:
            return messages.TextAnswer("ok")
        if directive.behaviour == "complete":
            return messages.TextAnswer(directive.token)
        if directive.behaviour == "recall":
            return messages.TextAnswer(recalled_token(body))
        if directive.behaviour == "fail":
            return messages.HttpError(500, self.error_text)
        return messages.Hold()


class LoopbackDirectiveRoute:
    """``route`` for the Chat Completions and Gemini fixtures (``fixtures.loopback`` wires).

    Same behaviours as :class:`ResponsesDirectiveRoute`. The directive is searched in the
    JSON body, so a product that repeats the conversation in a side request (a title, a
    routing classifier, a memory pass) gets that request answered by the same directive.
    ``fail_status`` (default 500) is the status of a ``fail`` answer: a product that
    retries server errors with a long backoff and no setting to stop it can be failed
    with a status it does not retry (e.g. 400).
    """

    def __init__(self, fail_status: int = 500) -> None:
        self.error_text = _FIXTURE_ERROR
        self.fail_status = fail_status

    def __call__(self, request: loopback.RecordedRequest) -> loopback.Behaviour:
        directive = find_directive(json.dumps(request.body, ensure_ascii=False))
        if directive is None:
            return loopback.TextAnswer("ok")
        if directive.behaviour == "complete":
            return loopback.TextAnswer(directive.token)
        if directive.behaviour == "fail":
            return loopback.HttpError(self.fail_status, self.error_text)
        return loopback.Hold()
