"""The jobserver that units compiled at once share (deconv_patch/kernels/job_pool.py): which
ninja joins one, and real ninja builds drawing from it, never running more jobs at once than
the pool holds, and all of their jobs done."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deconv_patch.kernels import job_pool


def test_ninja_joins_a_jobserver_from_1_13():
    assert job_pool.joins_jobserver("1.13.0\n")
    assert job_pool.joins_jobserver("1.13.2.git.kitware.jobserver-pipe-1")
    assert job_pool.joins_jobserver("2.0.1")
    assert not job_pool.joins_jobserver("1.11.1.git.kitware.jobserver-1")
    assert not job_pool.joins_jobserver("1.10.2")
    assert not job_pool.joins_jobserver("")
    assert not job_pool.joins_jobserver("ninja: unknown")


def test_a_pool_holds_the_slots_its_clients_do_not_own():
    with job_pool.JobPool(slots=6, clients=4) as pool:
        fd = os.open(pool.path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert os.read(fd, 100) == b"++"  # 6 slots, 4 owned by the builds themselves
        finally:
            os.close(fd)
        assert pool.makeflags == f"-j6 --jobserver-auth=fifo:{pool.path}"
        path = pool.path
    assert not path.exists() and not path.parent.exists()
    with job_pool.JobPool(slots=2, clients=5) as pool:
        assert pool.tokens == 0


_JOB = ("import sys, time; log = open(sys.argv[1], 'a'); "
        "log.write(f'start {time.time()}\\n'); log.flush(); time.sleep(0.3); "
        "log.write(f'end {time.time()}\\n'); open(sys.argv[2], 'w').close()")


def _most_at_once(log: Path) -> int:
    events = []
    for line in log.read_text().splitlines():
        kind, when = line.split()
        events.append((float(when), 1 if kind == "start" else -1))
    running = most = 0
    for _, step in sorted(events):
        running += step
        most = max(most, running)
    return most


@pytest.mark.skipif(not job_pool.ninja_joins_jobserver(),
                    reason="the ninja here does not join a jobserver (before 1.13)")
def test_ninja_builds_share_the_pool(tmp_path):
    log = tmp_path / "jobs.log"
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    builds = []
    for name in ("a", "b", "c"):
        folder = tmp_path / name
        folder.mkdir()
        lines = ["rule work", f"  command = {sys.executable} {script} {log} $out"]
        lines += [f"build out{i}: work" for i in range(5)]
        (folder / "build.ninja").write_text("\n".join(lines) + "\n")
        builds.append(folder)
    env = {k: v for k, v in os.environ.items() if k not in ("MAX_JOBS", "MAKEFLAGS")}
    with job_pool.JobPool(slots=4, clients=len(builds)) as pool:
        procs = [subprocess.Popen([shutil.which("ninja")], cwd=folder,
                                  env={**env, "MAKEFLAGS": pool.makeflags},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for folder in builds]
        outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
    assert all("Jobserver mode detected" in out for out in outputs), outputs
    assert all((folder / f"out{i}").exists() for folder in builds for i in range(5))
    # 15 jobs of 0.3 s: never more than the pool's 4 at once (alone, each ninja would run
    # cpus + 2), and more than one build's own job at a time
    assert 2 <= _most_at_once(log) <= 4
