"""Submit a sweep to Slurm: one train array, then an evaluation array chained on it.

    python slurm/submit.py configs/sweeps/gemma3-writer-scaling.yaml --dry-run
    python slurm/submit.py configs/sweeps/tiny-cpu.yaml --out runs/sweeps/tiny --prepare-cache

Expands the sweep's grid (see slurm/sweeplib.py for the YAML) into ``train_index.tsv`` and
``eval_index.tsv`` (one line per array task: task id, name, output directory, full command), renders
``train_array.sbatch`` / ``eval_array.sbatch`` with the sweep's resources, and runs

    sbatch --parsable --array=0-(N-1)%MAXPAR SWEEP_DIR/train_array.sbatch SWEEP_DIR/train_index.tsv
    sbatch --parsable --array=0-(N-1) --dependency=afterok:TRAIN_JOB --kill-on-invalid-dep=yes \
        SWEEP_DIR/eval_array.sbatch SWEEP_DIR/eval_index.tsv

(``aftercorr`` instead of ``afterok`` starts each evaluation as soon as its own training task has
succeeded). ``--dry-run`` prints the index, the commands and (``--show-scripts``) the scripts, and
writes and submits nothing. ``--local`` runs every cell here without Slurm, one after another (its
training, then its evaluation, through task_runner.py: finished commands are skipped, an interrupted
training resumes). Afterwards: ``python slurm/aggregate.py SWEEP_DIR`` and
``python eval/compare.py SWEEP_DIR``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from data_prep.yaml_config import strict_parser

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweeplib import (  # noqa: E402
    TEMPLATES,
    Sweep,
    SweepError,
    array_spec,
    index_lines,
    job_directives,
    job_env,
    load_sweep,
    render,
    sweep_json,
    with_earlier,
    write_json,
)

TRAIN_JOB_PLACEHOLDER = "$TRAIN_JOB_ID"


class Plan:
    """Everything a submission writes and runs, computed without touching the disk or the cluster."""

    def __init__(self, sweep: Sweep, sets: list[tuple[str, object]] | None = None):
        self.sweep = sweep
        self.sets = list(sets or [])
        d = sweep.sweep_dir
        self.paths = {
            "train_index": d / "train_index.tsv",
            "eval_index": d / "eval_index.tsv",
            "train_script": d / "train_array.sbatch",
            "eval_script": d / "eval_array.sbatch",
        }
        env = job_env()
        self.indexes = {k: index_lines(sweep, k) for k in ("train", "eval")}
        self.scripts = {k: render(TEMPLATES[k], job_directives(k, sweep), env) for k in ("train", "eval")}

    def train_command(self) -> list[str]:
        res = self.sweep.train_resources
        return [
            "sbatch",
            "--parsable",
            f"--array={array_spec(self.sweep.n, res.max_parallel)}",
            str(self.paths["train_script"]),
            str(self.paths["train_index"]),
        ]

    def eval_command(self, train_job: str = TRAIN_JOB_PLACEHOLDER) -> list[str]:
        res = self.sweep.eval_resources
        return [
            "sbatch",
            "--parsable",
            f"--array={array_spec(self.sweep.n, res.max_parallel)}",
            f"--dependency={self.sweep.dependency}:{train_job}",
            "--kill-on-invalid-dep=yes",
            str(self.paths["eval_script"]),
            str(self.paths["eval_index"]),
        ]

    def write(self, source: Path) -> None:
        d = self.sweep.sweep_dir
        for sub in ("logs", "status", "tasks"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        header = f"# the sweep as submitted: {source}"
        if self.sets:
            header += " with --set " + " ".join(f"{k}={json.dumps(v)}" for k, v in self.sets)
        (d / "sweep.yaml").write_text(
            header + "\n" + yaml.safe_dump(self.sweep.raw, sort_keys=False), encoding="utf-8"
        )
        previous = d / "sweep.json"
        try:
            earlier = json.loads(previous.read_text(encoding="utf-8")) if previous.is_file() else None
        except ValueError:
            earlier = None  # unreadable: this submission's plan stands alone
        write_json(d / "sweep.json", with_earlier(sweep_json(self.sweep), earlier))
        for kind in ("train", "eval"):
            self.paths[f"{kind}_index"].write_text("\n".join(self.indexes[kind]) + "\n", encoding="utf-8")
            self.paths[f"{kind}_script"].write_text(self.scripts[kind], encoding="utf-8")
            self.paths[f"{kind}_script"].chmod(0o755)


def parse_sets(items: list[str]) -> list[tuple[str, object]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SweepError(f"--set {item!r}: expected KEY=VALUE (e.g. train.args.max_steps=3)")
        out.append((key, yaml.safe_load(value)))
    return out


def sbatch(cmd: list[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SweepError(f"{shlex.join(cmd)} failed (exit {res.returncode}): {res.stderr.strip()}")
    job = res.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise SweepError(f"{shlex.join(cmd)}: unexpected output {res.stdout!r}")
    return job


def prepare_cache(sweep: Sweep) -> None:
    """Build the embedded default's SFT data and tiny base once, before the array tasks start (so they
    do not all build it at the same time). Only for tasks that use the embedded default."""
    from train.config import TINY, parse_config  # the config parser imports nothing heavy

    done = set()
    for t in sweep.tasks:
        cmd = t.train_command
        args = cmd[cmd.index(f"train/{t.role}.py") + 1 :]
        cfg = parse_config(t.role, args)
        key = (cfg.data_dir, cfg.cache_dir, cfg.model, json.dumps(cfg.to_dict()["tiny"], sort_keys=True))
        if key in done or (cfg.data_dir is not None and cfg.model != TINY):
            continue
        done.add(key)
        from data_prep.embedded import default_cache_dir
        from train.data import resolve_sft_dir

        cache = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()
        t0 = time.time()
        sft = resolve_sft_dir(cfg.data_dir, cache)
        if cfg.model == TINY:
            from train.tiny import ensure_tiny_base

            base = ensure_tiny_base(sft, cache, cfg.tiny)
            print(f"prepared: SFT data {sft}, tiny base {base} ({time.time() - t0:.0f} s)", flush=True)
        else:
            print(f"prepared: SFT data {sft} ({time.time() - t0:.0f} s)", flush=True)


def prepare_data(sweep: Sweep) -> None:
    """Build each data preset of the grid (``data: [default, unfiltered]``) before any task needs it:
    training reads ``--data-dir`` as given and never builds a preset itself."""
    presets = sweep.grid.get("data") or []
    if not presets:
        return
    from data_prep.embedded import ensure_preset_sft

    cache = (sweep.raw.get("train") or {}).get("args", {}).get("cache_dir")
    for preset in presets:
        t0 = time.time()
        sft = ensure_preset_sft(str(preset), Path(cache) if cache else None, progress=False)
        print(f"data preset {preset}: {sft} ({time.time() - t0:.0f} s)", flush=True)


def run_local(sweep: Sweep, plan: Plan) -> int:
    """Every cell in order without Slurm: its training, then its evaluation, through the task runner
    (finished commands are skipped and an interrupted training resumes, so rerunning continues)."""
    from task_runner import run_task

    failed = []
    for t in sweep.tasks:
        for kind in ("train", "eval"):
            rc = run_task(kind, plan.paths[f"{kind}_index"], t.index, grace=30.0)
            if rc in (130, 143):
                print(f"stopped at {kind} of {t.name}: rerun the same command to resume", file=sys.stderr)
                return rc
            if rc != 0:
                failed.append(f"{kind} {t.name} (exit {rc})")
                break  # no evaluation without a checkpoint
    done = sweep.n - len(failed)
    print(f"local: {done}/{sweep.n} cells done" + (f"; failed: {', '.join(failed)}" if failed else ""))
    print(f"next: python slurm/aggregate.py {sweep.sweep_dir}; python eval/compare.py {sweep.sweep_dir}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        sweep, plan = _load(args)
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"sweep {sweep.name}: {sweep.n} tasks "
        f"({' x '.join(f'{k} {len(v)}' for k, v in sweep.grid.items())}) -> {sweep.sweep_dir}"
    )
    if args.dry_run:
        return _dry_run(plan, args.show_scripts)
    if args.local:
        return _local(args, sweep, plan)
    return _submit(args, sweep, plan)


def _parser() -> argparse.ArgumentParser:
    p = strict_parser(
        prog="slurm/submit.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sweep", type=Path, help="a sweep YAML (configs/sweeps/*.yaml)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the index and sbatch commands; submit nothing"
    )
    p.add_argument(
        "--show-scripts", action="store_true", help="with --dry-run: print the rendered sbatch scripts"
    )
    p.add_argument("--out", type=Path, help="the sweep directory (default: <output_root>/<name> of the YAML)")
    p.add_argument(
        "--dependency",
        choices=["afterok", "aftercorr"],
        help="how the eval array waits for the train array (default: the YAML's, else afterok)",
    )
    p.add_argument("--max-parallel", type=int, help="at most this many train tasks at once (%%N of --array)")
    p.add_argument("--partition", help="partition of both arrays")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of the YAML by its dotted path, e.g. train.args.max_steps=3 (repeatable)",
    )
    p.add_argument(
        "--prepare-cache",
        action="store_true",
        help="build the embedded default's data and tiny base here before submitting",
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="run every cell here, one after another (train, then eval), without Slurm; rerun to resume",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="submit into a sweep directory that was submitted before (done tasks are skipped, "
        "interrupted ones resume)",
    )
    return p


def _load(args: argparse.Namespace) -> tuple[Sweep, Plan]:
    """The sweep YAML with the --set overrides and the flags that stand for fields; raises SweepError."""
    sets = parse_sets(args.set)
    if args.dependency:
        sets.append(("dependency", args.dependency))
    if args.max_parallel is not None:
        sets.append(("resources.max_parallel", args.max_parallel))
    if args.partition:
        sets += [("resources.partition", args.partition), ("eval_resources.partition", args.partition)]
    sweep = load_sweep(args.sweep, out=args.out, sets=sets)
    return sweep, Plan(sweep, sets)


def _dry_run(plan: Plan, show_scripts: bool) -> int:
    """Print the indexes and the two sbatch commands (and, if asked, the scripts); write nothing."""
    for kind in ("train", "eval"):
        print(f"\n# {plan.paths[kind + '_index']} (task_id, name, output_dir, command)")
        print("\n".join(plan.indexes[kind]))
    print("\n# commands")
    print(f"TRAIN_JOB_ID=$({shlex.join(plan.train_command())})")
    ecmd = plan.eval_command()
    dep = next(a for a in ecmd if a.startswith("--dependency="))
    print(shlex.join(ecmd).replace(shlex.quote(dep), dep.replace(TRAIN_JOB_PLACEHOLDER, '"$TRAIN_JOB_ID"')))
    if show_scripts:
        for kind in ("train", "eval"):
            print(f"\n# ---- {plan.paths[kind + '_script']}")
            print(plan.scripts[kind], end="")
    print("\n(dry run: nothing written, nothing submitted)")
    return 0


def _local(args: argparse.Namespace, sweep: Sweep, plan: Plan) -> int:
    """Every cell here, one after another, without Slurm."""
    plan.write(args.sweep)
    try:
        if args.prepare_cache:
            prepare_cache(sweep)
        prepare_data(sweep)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return run_local(sweep, plan)


def _submit(args: argparse.Namespace, sweep: Sweep, plan: Plan) -> int:
    """Both arrays to Slurm, the eval array waiting on the train array; ``submitted.json`` records them."""
    submitted = sweep.sweep_dir / "submitted.json"
    refusal = _refusal(submitted, args.force)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    plan.write(args.sweep)
    try:
        if args.prepare_cache:
            prepare_cache(sweep)
        prepare_data(sweep)
        tcmd = plan.train_command()
        train_job = sbatch(tcmd)
        print(f"train array: job {train_job}  ({shlex.join(tcmd)})")
        ecmd = plan.eval_command(train_job)
        eval_job = sbatch(ecmd)
        print(f"eval array:  job {eval_job}  ({shlex.join(ecmd)})")
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_json(
        submitted,
        {
            "train_job": train_job,
            "eval_job": eval_job,
            "submitted_unix": round(time.time(), 3),
            "commands": [shlex.join(tcmd), shlex.join(ecmd)],
        },
    )
    print(f"logs: {sweep.sweep_dir / 'logs'}; when done: python slurm/aggregate.py {sweep.sweep_dir}")
    return 0


def _refusal(submitted: Path, force: bool) -> str:
    """Why not to submit (a sweep submitted before without --force, or no sbatch here), or ""."""
    if submitted.is_file() and not force:
        old = json.loads(submitted.read_text(encoding="utf-8"))
        return (
            f"{submitted.parent} was submitted before (jobs {old.get('train_job')}, {old.get('eval_job')}); "
            "pass --force to submit it again (done tasks are skipped, interrupted ones resume)"
        )
    if shutil.which("sbatch") is None:
        return "sbatch not found (no Slurm client here; try slurm/dev_cluster.sh start)"
    return ""


if __name__ == "__main__":
    sys.exit(main())
