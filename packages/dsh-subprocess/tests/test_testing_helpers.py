"""dsh_subprocess.testing sees the host's tree the way a leftover check should."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from dsh_subprocess import SpawnSpec, _guard_server, guard_server_pid, spawn
from dsh_subprocess.testing import host_descendants, product_roots

pytestmark = pytest.mark.anyio


async def test_product_roots_are_the_products_and_the_server_is_no_descendant(
    tmp_path: Path, guarded: bool
) -> None:
    spec = SpawnSpec(
        argv=("/bin/sh", "-c", "echo ready; sleep 60"),
        cwd=str(tmp_path),
        env={"OVERLAY_MARK": "given"},
        host_death_guard=guarded,
    )
    async with await spawn(spec) as proc:
        assert proc.stdout is not None
        with anyio.fail_after(10):
            await proc.stdout.receive()
        roots = product_roots()
        assert [root.pid for root in roots] == [proc.pid]
        assert roots[0].cwd() == str(tmp_path)
        assert roots[0].environ()["OVERLAY_MARK"] == "given"
        # The tree first: the shell may still be forking `sleep`, and a pid seen in the tree
        # is a live descendant by the time the host's snapshot is taken.
        tree = proc.tree_pids()
        seen = {p.pid for p in host_descendants()}
        assert tree <= seen
        server = guard_server_pid()
        assert (server is not None) is (guarded and _guard_server.enabled)
        assert server not in seen
