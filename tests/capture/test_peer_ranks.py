"""Under torchrun the other ranks on this host are the job's own processes: the host
sampler follows them (``peers_cpu_pct``), and the CPUs "other processes" took leave them
out, as the step clock's snapshots do. Checked on a real process tree: an agent process
that starts two ranks with torchrun's environment, one busy, one sampling."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

psutil = pytest.importorskip("psutil")

RANK = textwrap.dedent("""
    import json, os, sys, time
    if os.environ["RANK"] == "1":  # a rank at work: one CPU busy
        t = time.time()
        while time.time() - t < 3.0:
            pass
        sys.exit(0)
    from diagnose.capture.samplers import HostSampler
    from diagnose.metrics.samples import _others
    time.sleep(0.3)  # the busy rank has started
    s = HostSampler()
    s.open()
    rows = []
    for _ in range(12):
        time.sleep(0.1)
        rows.append(s.sample())
    s.close()
    host = {k: [r.get(k) for r in rows] for k in rows[0]}
    print(json.dumps({"peers": host.get("peers_cpu_pct"), "others": _others(host),
                      "with_peers": _others({k: v for k, v in host.items()
                                             if k != "peers_cpu_pct"})}))
""")

AGENT = textwrap.dedent("""
    import os, subprocess, sys
    env = dict(os.environ, TORCHELASTIC_RUN_ID="t", LOCAL_WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, "-c", sys.argv[1]],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE if r == 0 else None, text=True)
             for r in (1, 0)]
    out = procs[1].communicate()[0]
    procs[0].wait()
    print(out, end="")
""")


def test_the_other_ranks_on_this_host_are_not_other_processes() -> None:
    out = subprocess.run([sys.executable, "-c", AGENT, RANK], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    peers = [p for p in got["peers"] if p is not None]
    # the busy rank (and the idle agent) followed, from the second tick on
    assert len(peers) >= 10 and sum(peers) / len(peers) >= 30.0
    # what the busy rank took is the job's own: "others" is less by about its CPU
    assert got["others"] is not None and got["with_peers"] is not None
    assert got["with_peers"] - got["others"] >= 0.25


def test_outside_torchrun_no_peers_are_followed(monkeypatch) -> None:
    from diagnose.capture.samplers import HostSampler

    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    s = HostSampler()
    s.open()
    try:
        assert "peers_cpu_pct" not in s.sample()
    finally:
        s.close()
