"""`scenario.client.ray_address` naming a cluster that cannot be joined: one line and exit 2,
not a traceback or Ray's connect retries for minutes. In a module of its own: no cluster runs
beside it (tests/test_ray_backend.py keeps one up for its module, which `auto` would join)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")


@pytest.mark.parametrize(("address", "words"), [
    ("auto", "Could not find any running Ray instance"),  # none runs, no RAY_ADDRESS
    ("not-an-address", "Invalid address format"),
    ("127.0.0.1:{port}", "cannot reach it (ConnectionRefusedError"),  # nothing listens there
])
def test_a_cluster_that_cannot_be_joined_is_one_line_and_exit_2(tmp_path, monkeypatch, address,
                                                                words):
    import socket

    from tests.test_cli import FAST, llmperf

    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        address = address.format(port=free.getsockname()[1])
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # its own temp dir: no cluster this host started last is found there
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))
    proc = llmperf(*FAST, "scenario.num_requests=8", "scenario.client.workers=2",
                   "scenario.client.backend=ray", f"scenario.client.ray_address={address}",
                   "telemetry.enabled=false", "report.enabled=false",
                   f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"scenario.client.ray_address={address}" in lines[0] and words in lines[0], lines[0]
