"""Evaluation chunks in worker processes: the same results in chunk order, the worker count the config
and the machine allow, and no worker left running when the evaluation is killed."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from eval.generation import DecodingConfig, DecodingConfigError, load_decoding
from eval.workers import run_chunks, worker_count

REPO = Path(__file__).resolve().parents[2]

TASKS = '''
import os, time

def build(tag):
    return {"tag": tag, "pid": os.getpid()}

def task(chunk, *, models):
    return [{"item": x, "square": x * x, "tag": models["tag"]} for x in chunk]

def slow(chunk, *, models):
    open(os.path.join(os.environ["PIDS"], str(os.getpid())), "w").close()
    time.sleep(120)
    return []
'''


def _tasks_module(tmp_path: Path):
    (tmp_path / "worker_tasks.py").write_text(TASKS)
    sys.path.insert(0, str(tmp_path))
    import worker_tasks

    return worker_tasks


def test_workers_return_the_same_records_in_chunk_order(tmp_path):
    mod = _tasks_module(tmp_path)
    try:
        chunks = [[1, 2], [3], [4, 5, 6], [7]]
        here = list(run_chunks(mod.task, chunks, models=mod.build("x"), workers=1, build=mod.build, build_args=("x",)))
        spawned = list(run_chunks(mod.task, chunks, models=None, workers=2, build=mod.build, build_args=("x",)))
    finally:
        sys.path.remove(str(tmp_path))
    assert spawned == here
    assert [r["item"] for recs in spawned for r in recs] == [1, 2, 3, 4, 5, 6, 7]


def test_worker_count_follows_config_cores_and_chunks(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the CPU rule, on any machine
    cfg = DecodingConfig()
    assert worker_count(cfg, 8, backends_given=True) == 1  # backends built by the caller stay here
    assert worker_count(cfg, 1, backends_given=False) == 1
    assert worker_count(DecodingConfig(workers=3), 2, backends_given=False) == 2
    assert worker_count(DecodingConfig(workers=1), 8, backends_given=False) == 1
    assert worker_count(DecodingConfig(backend="openai"), 8, backends_given=False) == 1
    cores = len(os.sched_getaffinity(0))
    assert worker_count(cfg, 64, backends_given=False) == max(1, cores)  # threads: 1 per process
    assert worker_count(DecodingConfig(threads=cores), 64, backends_given=False) == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert worker_count(cfg, 64, backends_given=False) == 1  # a GPU: one process holds the model


def test_workers_setting_is_checked_and_does_not_change_the_digest(tmp_path):
    bad = tmp_path / "decoding.yaml"
    bad.write_text("workers: 0\n")
    try:
        load_decoding(bad)
    except DecodingConfigError as err:
        assert "workers" in str(err) and str(bad) in str(err)
    else:
        raise AssertionError("workers: 0 was accepted")
    assert DecodingConfig(workers=2).digest() == DecodingConfig().digest()


def test_workers_end_when_the_evaluation_is_killed(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "worker_tasks.py").write_text(TASKS)
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(REPO)!r}]
        import worker_tasks
        from eval.workers import run_chunks
        for _ in run_chunks(worker_tasks.slow, [[1], [2]], models=None, workers=2,
                            build=worker_tasks.build, build_args=("x",)):
            pass
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PIDS": str(pids)})
    deadline = time.time() + 120
    while len(list(pids.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.1)
    workers = [int(p.name) for p in pids.iterdir()]
    assert len(workers) == 2, "the workers did not start"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.time() + 20
    while time.time() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers), "a worker outlived the killed evaluation"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
