"""Measured performance of dsh-python against the official SDKs and the products' own limits.

Run from the repository root: ``uv run --locked python -m bench`` (see ``bench/README.md``).
"""
