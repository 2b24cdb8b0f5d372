"""The session's SeaweedFS starts even when one of the ports it picked is taken before it
binds it (any process's outbound connection may take a free port meanwhile): CI saw
"bind: address already in use" on the S3 port, and every S3 test of the run failed."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.support.seaweed import SeaweedServer, weed_binary


def test_a_port_taken_between_the_pick_and_the_bind_is_picked_again(tmp_path: Path) -> None:
    if weed_binary() is None and not IN_CI:
        pytest.skip("no weed binary")
    server = SeaweedServer(tmp_path)
    taken = server.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        try:
            server.start()
            assert server.port != taken
            bucket = server.new_bucket()
            server.client().put_object(Bucket=bucket, Key="k", Body=b"v")
            assert server.client().get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
            assert "address already in use" in server.tail(400)
        finally:
            server.stop()
