"""Evaluation chunks side by side in CPU worker processes, results in chunk order.

Generation on the CPU runs one torch thread per process (``threads: 1`` in decoding.yaml: for a small
model, more threads wait on each other at every small matmul), so a single evaluation process left the
other cores idle. Chunks are independent and each has a fixed composition, so computing them in
separate processes gives the same answers; results come back in chunk order and the caller appends
them to its run directory as before (a killed run resumes from the chunks already written).

Workers are spawned (not forked: the parent may hold torch thread pools) and build their own backends
once, from the same config as the parent, through ``build(*build_args)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

_MODELS: Any = None  # the worker process's backends, built once by _init_worker


def worker_count(decoding, n_chunks: int, *, backends_given: bool) -> int:
    """Processes for ``n_chunks`` chunks: ``decoding.workers`` if set, else the CPU's cores divided by
    the threads of one process; always 1 for backends passed in (tests), other backends than
    transformers, or a GPU."""
    if backends_given or decoding.backend != "transformers" or n_chunks <= 1:
        return 1
    if decoding.workers is not None:
        return max(1, min(int(decoding.workers), n_chunks))
    import torch

    if torch.cuda.is_available():
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores // max(1, decoding.threads or 1), n_chunks))


def _exit_with_parent(parent: int) -> None:
    """End this worker when the evaluation that spawned it is gone (killed, preempted): its queue
    would otherwise keep the worker computing chunks nobody will write."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _init_worker(build: Callable[..., Any], build_args: tuple, parent: int) -> None:
    global _MODELS
    from eval.cli import setup

    _exit_with_parent(parent)
    setup()
    _MODELS = build(*build_args)


def _in_worker(task: Callable[..., list[dict]], chunk: Sequence[Any]) -> list[dict]:
    return task(chunk, models=_MODELS)


def run_chunks(
    task: Callable[..., list[dict]],
    chunks: Sequence[Sequence[Any]],
    *,
    models: Any,
    workers: int,
    build: Callable[..., Any],
    build_args: tuple = (),
) -> Iterator[list[dict]]:
    """Yield ``task(chunk, models=...)`` for every chunk, in order. With ``workers`` > 1 the chunks run
    in that many spawned processes whose backends come from ``build(*build_args)`` (module-level
    callables and picklable arguments); otherwise here, with ``models``."""
    if workers <= 1:
        for chunk in chunks:
            yield task(chunk, models=models)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(build, build_args, os.getpid()),
    )
    try:
        yield from pool.map(_in_worker, [task] * len(chunks), chunks)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class Pass:
    """What ``resume_and_run`` did: every item's record in item order, and how many were reused."""

    records: list[dict]
    reused: int
    computed: int


def resume_and_run(
    items: Sequence[Any],
    ids: Sequence[str],
    digests: dict[str, str],
    rd,
    task: Callable[..., list[dict]],
    *,
    chunk: int,
    decoding,
    models: Any,
    backends_given: bool,
    build: Callable[..., Any],
    build_args: tuple,
    desc: str,
    unit: str,
    progress: bool,
) -> Pass:
    """An evaluation's item loop: reuse the records ``rd`` (a ``RunDir``) holds for these digests,
    compute the rest in chunks of ``chunk`` (in worker processes when the machine allows), append
    each chunk to ``rd`` as it is done, and show progress on stderr."""
    import logging
    import sys

    from tqdm import tqdm

    done = {i: rd.reusable(i, digests[i]) for i in ids}
    pending = [x for x, i in zip(items, ids, strict=True) if done[i] is None]
    reused = len(items) - len(pending)
    bar = tqdm(
        total=len(items),
        initial=reused,
        desc=desc,
        unit=unit,
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    chunks = [pending[start : start + chunk] for start in range(0, len(pending), chunk)]
    workers = worker_count(decoding, len(chunks), backends_given=backends_given)
    if workers > 1:
        logging.getLogger("ledgerwright.eval").info(
            "%s: %d chunks on %d worker processes", desc, len(chunks), workers
        )
    for recs in run_chunks(task, chunks, models=models, workers=workers, build=build, build_args=build_args):
        rd.append(recs)
        for r in recs:
            done[r["id"]] = r
        bar.update(len(recs))
    bar.close()
    return Pass([done[i] for i in ids], reused, len(pending))
