"""Reliability and security evidence for dsh-python (issue 10).

A hostile-product fault matrix over the Codex, Claude Code and ACP providers, secret
non-leak properties, a cancellation storm, host death and a bad-configuration matrix.
``python -m reliability --profile ci|nightly`` runs them and prints one table.
"""
