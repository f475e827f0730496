"""The output-schema hooks of a product provider (``output:flag-honest``).

A product provider declares the ``output_schema`` capability only when its product
constrains the final answer itself; the host validates the answer in every case
(:mod:`dsh_subagent.structured`). A product takes the schema either on its command line
(override :meth:`ProductOutputHooks.launch_structured`) or over its protocol in ``run()``
(read :attr:`~dsh_subagent.ProductChild.output_schema`).
"""

from __future__ import annotations

from pydantic import JsonValue

from dsh_subagent.product_child import Launch

__all__ = ["ProductOutputHooks"]


class ProductOutputHooks:
    """Mixed into :class:`~dsh_subagent.ProductProvider`; both hooks are optional."""

    @property
    def enforces_output_schema(self) -> bool:
        """Whether the product constrains its answer to the request's ``output_schema``.

        ``False`` by default: the service then refuses a request with a schema before
        start (``UNSUPPORTED_CAPABILITY``). Return ``True`` only for a product that
        enforces the schema itself, never for one that would merely be asked nicely.
        """
        return False

    def launch_structured(
        self, launch: Launch, cwd: str, resume: str | None, schema: dict[str, JsonValue]
    ) -> Launch:
        """How to start the product for a run whose answer must match ``schema``.

        Called only for a request with an ``output_schema``, after ``launch()`` (or
        ``launch_continuation()``) built ``launch``. The default returns it unchanged,
        for a product that takes the schema over its protocol.
        """
        del cwd, resume, schema
        return launch
