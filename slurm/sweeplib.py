"""Sweeps on Slurm: load a sweep YAML, expand its grid into array tasks, render the sbatch scripts.

A sweep YAML (``configs/sweeps/*.yaml``)::

    name: gemma3-writer-scaling
    output_root: runs/sweeps            # the sweep directory is <output_root>/<name> (or --out)
    grid:                               # the cartesian product, in this key order, is the task list
      role: [writer]                    #   writer | reader (chooses train/writer.py or train/reader.py)
      examples: [140, 280, 561, 1122]   #   every other key becomes a train flag: --examples 140
      # data: [default, unfiltered]     #   a data preset (configs/data/<name>.yaml) of the embedded
                                        #   default: --data-dir <cache>/sft-<name> (data_prep.embedded)
      seed: [0, 1, 2]
    train:
      config: configs/train/gemma-3-12b.yaml        # --config preset (optional)
      accelerate_config: configs/accelerate/ddp_4gpu.yaml   # --config_file (optional)
      args: {save_steps: 50}                        # more train flags (True -> --flag, False -> --no-flag)
    eval:
      script: policy_reuse              # policy_reuse (default for writers) or sabotage (readers), or a
                                        #   list run in order, each into eval/<script>: [sabotage, policy_reuse]
                                        #   (a reader task's policy reuse: its checkpoint is the executor)
      executor: rules                   # policy_reuse executor when no reader is listed (writers in a
                                        #   list: always, since the reader serves sabotage)
      reader: null                      # a reader checkpoint: writers are evaluated with it
      writer: null                      # the writer checkpoint that reader tasks are evaluated with
      limit: 200
      args: {}                          # flags of every script; {sabotage: {...}} flags of one script
    resources:                          # the train array; preset defaults, every key overridable
      preset: a6000-l40s                # a6000 | l40s | a6000-l40s | cpu
      gpus: 4
      max_parallel: 6                   # --array=0-(N-1)%max_parallel
    eval_resources: {gpus: 1, time: "04:00:00"}
    dependency: afterok                 # afterok (eval after the whole train array) | aftercorr (per task)

The sweep directory gets ``sweep.json`` (the expanded plan), ``train_index.tsv`` and
``eval_index.tsv`` (one line per array task: ``task_id <TAB> name <TAB> output_dir <TAB> command``),
the rendered ``train_array.sbatch`` and ``eval_array.sbatch``, ``logs/`` (``%A_%a`` files),
``status/`` (one JSON per cell, written by ``task_runner.py``) and ``tasks/<name>/{ckpt,eval}``. A
submission of part of the grid (``--set grid.seed=[1,2]``) keeps the cells of earlier submissions in
``sweep.json`` under ``earlier_tasks``, so the aggregate and the comparison read every cell.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
SLURM_DIR = REPO_ROOT / "slurm"
TEMPLATES = {
    "train": SLURM_DIR / "train_array.sbatch",
    "eval": SLURM_DIR / "eval_array.sbatch",
    "multinode": SLURM_DIR / "multinode.sbatch",
}
BLOCK_BEGIN = "# >>> resources"
BLOCK_END = "# <<< resources"
ENV_BEGIN = "# >>> environment"
ENV_END = "# <<< environment"
REQUEUE_SIGNAL = "USR1"

# Nodes of 48 GB cards (A6000, L40S). Constraint names are site features: override `constraint` (or
# set it to null) to match your cluster's `sinfo -o %f`; `gres_type` adds a typed GRES (gpu:l40s:4).
PRESETS: dict[str, dict[str, Any]] = {
    "a6000": {
        "gpus": 4,
        "cpus_per_gpu": 8,
        "mem_per_gpu_gb": 60,
        "time": "24:00:00",
        "constraint": "a6000",
    },
    "l40s": {
        "gpus": 4,
        "cpus_per_gpu": 8,
        "mem_per_gpu_gb": 60,
        "time": "24:00:00",
        "constraint": "l40s",
    },
    "a6000-l40s": {
        "gpus": 4,
        "cpus_per_gpu": 8,
        "mem_per_gpu_gb": 60,
        "time": "24:00:00",
        "constraint": "a6000|l40s",
    },
    "cpu": {"gpus": 0, "cpus": 1, "mem_gb": 3, "time": "00:30:00", "constraint": None},
}
EVAL_DEFAULTS = {"gpus": 1, "time": "04:00:00", "max_parallel": None}


class SweepError(ValueError):
    """A bad sweep file; the message names the file and the field."""


@dataclass
class Resources:
    """What one array task asks for. ``gpus: 0`` is a CPU task (``cpus`` cores)."""

    preset: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gpus: int = 0
    gres_type: str | None = None
    cpus_per_gpu: int = 8
    cpus: int | None = None  # CPU tasks (gpus 0); for GPU tasks the default is gpus * cpus_per_gpu
    mem_per_gpu_gb: int | None = None
    mem_gb: int | None = None  # total; default gpus * mem_per_gpu_gb
    time: str = "01:00:00"
    constraint: str | None = None
    max_parallel: int | None = None
    requeue: bool = True
    signal_seconds: int = 300  # --signal=B:USR1@N: warn the task N seconds before its time limit
    extra: list[str] = field(default_factory=list)  # more sbatch options, verbatim ("--exclusive")

    @property
    def cpus_per_task(self) -> int:
        if self.cpus is not None:
            return self.cpus
        return max(1, self.gpus * self.cpus_per_gpu) if self.gpus else 1

    @property
    def mem(self) -> str | None:
        if self.mem_gb is not None:
            return f"{self.mem_gb}G"
        if self.gpus and self.mem_per_gpu_gb:
            return f"{self.gpus * self.mem_per_gpu_gb}G"
        return None


RESOURCE_KEYS = {f.name for f in dataclasses.fields(Resources)}


def make_resources(spec: dict | None, *, where: str, base: dict | None = None) -> Resources:
    """Preset defaults < ``base`` < ``spec``; unknown keys and presets raise SweepError."""
    spec = dict(spec or {})
    merged: dict[str, Any] = {}
    preset = spec.get("preset", (base or {}).get("preset"))
    if preset is not None:
        if preset not in PRESETS:
            raise SweepError(f"{where}: preset: unknown preset {preset!r} (known: {sorted(PRESETS)})")
        merged.update(PRESETS[preset])
        merged["preset"] = preset
    for key, value in {**(base or {}), **spec}.items():
        if key not in RESOURCE_KEYS:
            raise SweepError(f"{where}: {key}: unknown resource field (known: {sorted(RESOURCE_KEYS)})")
        merged[key] = value
    res = Resources(**merged)
    for name in ("gpus", "cpus_per_gpu", "signal_seconds"):
        value = getattr(res, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise SweepError(f"{where}: {name}: expected a non-negative integer, got {value!r}")
    if res.max_parallel is not None and (not isinstance(res.max_parallel, int) or res.max_parallel < 1):
        raise SweepError(f"{where}: max_parallel: expected a positive integer, got {res.max_parallel!r}")
    if not re.fullmatch(r"(\d+-)?\d{1,3}(:\d\d){0,2}", str(res.time)):
        raise SweepError(f"{where}: time: expected [D-]HH:MM:SS, got {res.time!r}")
    if not isinstance(res.extra, list):
        raise SweepError(f"{where}: extra: expected a list of sbatch options")
    return res


@dataclass
class Task:
    index: int
    name: str
    role: str
    params: dict[str, Any]  # grid values of this task (role included)
    train_dir: str
    eval_dir: str
    train_command: list[str]
    eval_command: list[str]


@dataclass
class Sweep:
    name: str
    source: str
    sweep_dir: Path
    tasks: list[Task]
    train_resources: Resources
    eval_resources: Resources
    dependency: str
    grid: dict[str, list]
    raw: dict

    @property
    def n(self) -> int:
        return len(self.tasks)


# ---- loading ------------------------------------------------------------------------------------
TOP_KEYS = {
    "name",
    "description",
    "output_root",
    "grid",
    "train",
    "eval",
    "resources",
    "eval_resources",
    "dependency",
}
TRAIN_KEYS = {"config", "accelerate_config", "args"}
EVAL_KEYS = {"script", "executor", "reader", "writer", "limit", "args"}
ABBREV = {"examples": "e", "seed": "s", "data": ""}
CHAIN = "&&"  # separates the commands of an eval task that runs several scripts (run in order)
EVAL_SCRIPTS = ("policy_reuse", "sabotage")


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def cli_args(mapping: dict, where: str) -> list[str]:
    """``{max_steps: 2, packing: false}`` -> ``["--max-steps", "2", "--no-packing"]``."""
    out: list[str] = []
    if not isinstance(mapping, dict):
        raise SweepError(f"{where}: expected a mapping of flags")
    for key, value in mapping.items():
        if isinstance(value, bool):
            out.append(_flag(key) if value else "--no-" + key.replace("_", "-"))
        elif value is None:
            out += [_flag(key), "none"]
        elif isinstance(value, int | float | str):
            out += [_flag(key), str(value)]
        else:
            raise SweepError(f"{where}: {key}: expected a scalar, got {type(value).__name__}")
    return out


def task_name(params: dict[str, Any]) -> str:
    parts = []
    for key, value in params.items():
        parts.append(str(value) if key == "role" else f"{ABBREV.get(key, key)}{value}")
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", "-".join(parts))


def load_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SweepError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark else ""
        raise SweepError(f"{path}:{line} invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SweepError(f"{path}: expected a mapping at the top level")
    return data


def _check_keys(mapping: Any, allowed: set[str], where: str) -> dict:
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise SweepError(f"{where}: expected a mapping")
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise SweepError(f"{where}: unknown field(s) {unknown} (known: {sorted(allowed)})")
    return mapping


def apply_set(data: dict, dotted: str, value: Any) -> None:
    """``apply_set(d, "train.args.max_steps", 3)``: set a nested field, creating mappings on the way."""
    node = data
    keys = dotted.split(".")
    for key in keys[:-1]:
        if node.get(key) is None:
            node[key] = {}
        if not isinstance(node[key], dict):
            raise SweepError(f"--set {dotted}: {key} is not a mapping")
        node = node[key]
    node[keys[-1]] = value


def load_sweep(
    path: str | Path, *, out: str | Path | None = None, sets: list[tuple[str, Any]] | None = None
) -> Sweep:
    """Read and expand a sweep; ``out`` replaces ``<output_root>/<name>``; ``sets`` are (dotted path,
    value) overrides applied to the YAML first (``--set train.args.max_steps=3``)."""
    path = Path(path)
    data = load_yaml(path)
    for dotted, value in sets or []:
        apply_set(data, dotted, value)
    src = str(path)
    _check_keys(data, TOP_KEYS, src)
    name = data.get("name") or path.stem
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(name)):
        raise SweepError(f"{src}: name: use letters, digits, '.', '_' or '-' (got {name!r})")
    grid = data.get("grid")
    if not isinstance(grid, dict) or not grid:
        raise SweepError(f"{src}: grid: expected a mapping of parameter -> list of values")
    grid = {k: (v if isinstance(v, list) else [v]) for k, v in grid.items()}
    for key, values in grid.items():
        if not values:
            raise SweepError(f"{src}: grid.{key}: empty list")
        if key == "output_dir":
            raise SweepError(f"{src}: grid.output_dir: the sweep sets output directories itself")
    for role in grid.get("role", ["writer"]):
        if role not in ("writer", "reader"):
            raise SweepError(f"{src}: grid.role: expected writer or reader, got {role!r}")
    train = _check_keys(data.get("train"), TRAIN_KEYS, f"{src}: train")
    ev = _check_keys(data.get("eval"), EVAL_KEYS, f"{src}: eval")
    dependency = data.get("dependency", "afterok")
    if dependency not in ("afterok", "aftercorr"):
        raise SweepError(f"{src}: dependency: expected afterok or aftercorr, got {dependency!r}")
    train_res = make_resources(data.get("resources"), where=f"{src}: resources")
    eval_base = {
        **EVAL_DEFAULTS,
        "preset": train_res.preset,
        "partition": train_res.partition,
        "account": train_res.account,
        "qos": train_res.qos,
        "constraint": train_res.constraint,
        "gres_type": train_res.gres_type,
    }
    if train_res.gpus == 0:
        eval_base.update(gpus=0, cpus=train_res.cpus_per_task, time=train_res.time)
    eval_res = make_resources(data.get("eval_resources"), where=f"{src}: eval_resources", base=eval_base)

    if out is not None:
        sweep_dir = Path(out)
    else:
        sweep_dir = Path(data.get("output_root", "runs/sweeps")) / str(name)
    if not sweep_dir.is_absolute():
        sweep_dir = (Path.cwd() / sweep_dir).resolve()

    keys = list(grid)
    tasks = []
    for i, values in enumerate(itertools.product(*(grid[k] for k in keys))):
        params = dict(zip(keys, values))
        role = params.get("role", "writer")
        tname = task_name(params)
        task_dir = sweep_dir / "tasks" / tname
        train_dir = str(task_dir / "ckpt")
        eval_dir = str(task_dir / "eval")
        tcmd = train_command(role, params, train, train_dir, src)
        ecmd = eval_command(role, ev, train_dir, eval_dir, src)
        tasks.append(Task(i, tname, role, params, train_dir, eval_dir, tcmd, ecmd))
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise SweepError(f"{src}: grid: two tasks get the same name; make the grid values distinct")
    return Sweep(str(name), src, sweep_dir, tasks, train_res, eval_res, dependency, grid, data)


def _repo_rel(p: str) -> str:
    """Paths inside the repo stay relative (jobs run with --chdir at the repo root)."""
    path = Path(p)
    if not path.is_absolute():
        return p
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return p


def train_command(role: str, params: dict, train: dict, output_dir: str, where: str) -> list[str]:
    cmd = ["accelerate", "launch"]
    if train.get("accelerate_config"):
        cmd += ["--config_file", _repo_rel(str(train["accelerate_config"]))]
    cmd.append(f"train/{role}.py")
    if train.get("config"):
        cmd += ["--config", _repo_rel(str(train["config"]))]
    extra = dict(train.get("args") or {})
    grid = {k: v for k, v in params.items() if k not in ("role", "data")}
    if "data" in params:
        if "data_dir" in extra or "data_dir" in grid:
            raise SweepError(f"{where}: grid.data: set by the sweep; drop data_dir")
        grid = {**data_args(str(params["data"]), extra.get("cache_dir"), where), **grid}
    cmd += cli_args(grid, f"{where}: grid")
    for key in ("output_dir", "resume"):
        if key in extra:
            raise SweepError(f"{where}: train.args.{key}: set by the sweep and the task runner")
    cmd += cli_args(extra, f"{where}: train.args")
    cmd += ["--output-dir", output_dir]
    check_train_flags(role, cmd[cmd.index(f"train/{role}.py") + 1 :], where)
    return cmd


def check_train_flags(role: str, flags: list[str], where: str) -> None:
    """Parse a task's training flags exactly as ``train/<role>.py`` will, at submit time: a typo in a
    sweep or a ``--set`` override fails here, naming it, instead of in every array task."""
    import contextlib
    import io

    from train.config import ConfigError, parse_config

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse_config(role, flags)
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        why = lines[-1].split("error: ", 1)[-1] if lines else "unusable flags"
        raise SweepError(f"{where}: train flags: {why}") from None
    except ConfigError as exc:
        raise SweepError(f"{where}: train flags: {exc}") from None


def data_args(preset: str, cache_dir: str | None, where: str) -> dict:
    """Train flags of a ``data`` grid value: the embedded default's build under that data preset."""
    from data_prep.embedded import preset_sft_dir  # light: paths only

    if not (REPO_ROOT / "configs" / "data" / f"{preset}.yaml").is_file():
        raise SweepError(f"{where}: grid.data: no data preset configs/data/{preset}.yaml")
    if preset == "default":
        return {}
    return {"data_dir": str(preset_sft_dir(preset, Path(cache_dir) if cache_dir else None))}


def eval_command(role: str, ev: dict, ckpt: str, eval_dir: str, where: str) -> list[str]:
    """Writers: ``eval/policy_reuse.py`` (memory writers; the rules executor, or the listed reader as
    executor) or ``eval/sabotage.py`` with the listed reader; readers: sabotage with ``eval.writer``.
    A list of scripts gives one command per script (each into ``eval_dir/<script>``) joined by CHAIN."""
    scripts = ev.get("script") or ("policy_reuse" if role == "writer" else "sabotage")
    if isinstance(scripts, str):
        return _eval_one(scripts, role, ev, ckpt, eval_dir, where, executor_first=False)
    if not isinstance(scripts, list) or len(set(scripts)) != len(scripts):
        raise SweepError(f"{where}: eval.script: expected a script or a list of distinct scripts")
    cmd: list[str] = []
    for script in scripts:
        sub = _eval_one(script, role, ev, ckpt, str(Path(eval_dir) / str(script)), where, executor_first=True)
        cmd += ([CHAIN] if cmd else []) + sub
    return cmd


def _eval_one(
    script: str, role: str, ev: dict, ckpt: str, eval_dir: str, where: str, *, executor_first: bool
) -> list[str]:
    if script not in EVAL_SCRIPTS:
        raise SweepError(f"{where}: eval.script: expected policy_reuse or sabotage, got {script!r}")
    if role == "writer":
        writer, reader = ckpt, (_repo_rel(str(ev["reader"])) if ev.get("reader") else None)
    else:
        if not ev.get("writer"):
            raise SweepError(
                f"{where}: eval.writer: reader tasks need a writer checkpoint to be evaluated with"
            )
        writer, reader = _repo_rel(str(ev["writer"])), ckpt
        if script != "sabotage" and not executor_first:
            raise SweepError(f"{where}: eval.script: reader tasks are evaluated with sabotage")
    # the task's own checkpoint stays absolute (like the index's output_dir)
    cmd = ["python", f"eval/{script}.py", "--writer", writer]
    if script == "sabotage":
        if not reader:
            raise SweepError(f"{where}: eval.reader: the sabotage evaluation needs a reader checkpoint")
        cmd += ["--reader", reader]
    elif executor_first and role == "writer":
        # in a list beside sabotage the listed reader serves sabotage; policy reuse gets the executor
        cmd += ["--executor", str(ev.get("executor") or reader or "rules")]
    else:  # a reader task's policy reuse: its own checkpoint decides on the listed writer's memory
        cmd += ["--executor", reader or str(ev.get("executor") or "rules")]
    if ev.get("limit") is not None:
        cmd += ["--limit", str(ev["limit"])]
    extra = dict(ev.get("args") or {})
    per_script = {k: extra.pop(k) for k in EVAL_SCRIPTS if k in extra}
    extra.update(per_script.get(script) or {})
    if "out" in extra:
        raise SweepError(f"{where}: eval.args.out: set by the sweep")
    cmd += cli_args(extra, f"{where}: eval.args")
    cmd += ["--out", eval_dir]
    return cmd


def chain_parts(cmd: list[str]) -> list[list[str]]:
    """The commands of an eval task (one, or several joined by CHAIN)."""
    parts: list[list[str]] = [[]]
    for arg in cmd:
        if arg == CHAIN:
            parts.append([])
        else:
            parts[-1].append(arg)
    return [p for p in parts if p]


def out_of(cmd: list[str], default: str) -> str:
    """The ``--out`` of an eval command (``default`` when it has none)."""
    return cmd[cmd.index("--out") + 1] if "--out" in cmd[:-1] else default


# ---- index files --------------------------------------------------------------------------------
def index_lines(sweep: Sweep, kind: str) -> list[str]:
    """One line per array task: ``task_id<TAB>name<TAB>output_dir<TAB>command``."""
    lines = []
    for t in sweep.tasks:
        out = t.train_dir if kind == "train" else t.eval_dir
        cmd = t.train_command if kind == "train" else t.eval_command
        lines.append("\t".join([str(t.index), t.name, out, shlex.join(cmd)]))
    return lines


@dataclass
class IndexEntry:
    task_id: int
    name: str
    output_dir: str
    command: list[str]


def read_index(path: str | Path, task_id: int) -> IndexEntry:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if not 0 <= task_id < len(lines):
        raise SweepError(f"{path}: no line for task {task_id} (the index has {len(lines)} tasks)")
    parts = lines[task_id].split("\t")
    if len(parts) != 4 or parts[0] != str(task_id):
        raise SweepError(
            f"{path}: line {task_id + 1}: expected task_id, name, output_dir, command (tab-separated)"
        )
    return IndexEntry(int(parts[0]), parts[1], parts[2], shlex.split(parts[3]))


# ---- sbatch text --------------------------------------------------------------------------------
def array_spec(n: int, max_parallel: int | None) -> str:
    spec = f"0-{n - 1}"
    return f"{spec}%{max_parallel}" if max_parallel else spec


def resource_directives(res: Resources) -> list[str]:
    d = []
    if res.partition:
        d.append(f"--partition={res.partition}")
    if res.account:
        d.append(f"--account={res.account}")
    if res.qos:
        d.append(f"--qos={res.qos}")
    d += ["--nodes=1", "--ntasks=1"]
    if res.gpus:
        d.append(f"--gres=gpu:{res.gres_type + ':' if res.gres_type else ''}{res.gpus}")
    d.append(f"--cpus-per-task={res.cpus_per_task}")
    if res.mem:
        d.append(f"--mem={res.mem}")
    d.append(f"--time={res.time}")
    if res.constraint:
        d.append(f"--constraint={res.constraint}")
    d += list(res.extra)
    return d


def job_directives(kind: str, sweep: Sweep) -> list[str]:
    res = sweep.train_resources if kind == "train" else sweep.eval_resources
    d = [f"--job-name={sweep.name}-{kind}"]
    d += resource_directives(res)
    d.append(f"--array={array_spec(sweep.n, res.max_parallel)}")
    d.append(f"--output={sweep.sweep_dir / 'logs' / (kind + '_%A_%a.out')}")
    d.append("--open-mode=append")  # a requeued task appends to its log instead of truncating it
    d.append(f"--chdir={REPO_ROOT}")
    if res.requeue:
        d.append("--requeue")
        d.append(f"--signal=B:{REQUEUE_SIGNAL}@{res.signal_seconds}")
    return d


def _quote_directive(option: str) -> str:
    # `#SBATCH` lines are not parsed by a shell; `|` in constraints and spaces stay as they are
    return f"#SBATCH {option}"


def render(template: str | Path, directives: list[str], env: dict[str, str] | None = None) -> str:
    """The template with its resources block replaced by ``directives`` (and its environment block by
    ``env`` exports); the rest of the script is kept byte for byte."""
    text = Path(template).read_text(encoding="utf-8")
    text = _replace_block(text, BLOCK_BEGIN, BLOCK_END, [_quote_directive(o) for o in directives], template)
    if env is not None:
        lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
        text = _replace_block(text, ENV_BEGIN, ENV_END, lines, template)
    return text


def _replace_block(text: str, begin: str, end: str, body: list[str], where) -> str:
    lines = text.splitlines(keepends=True)
    try:
        b = next(i for i, line in enumerate(lines) if line.startswith(begin))
        e = next(i for i, line in enumerate(lines) if line.startswith(end) and i > b)
    except StopIteration:
        raise SweepError(f"{where}: no '{begin}' ... '{end}' block to fill") from None
    marker = lines[b].rstrip("\n").split(" (")[0]
    new = [f"{marker} (written by slurm/submit.py)\n", *(line + "\n" for line in body), lines[e]]
    return "".join(lines[:b] + new + lines[e + 1 :])


def directives_of(text: str) -> list[str]:
    """The ``#SBATCH`` options of a script, in order (stops at the first command, as sbatch does)."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#SBATCH"):
            out.append(s[len("#SBATCH") :].strip())
        elif s and not s.startswith("#"):
            break
    return out


def job_env() -> dict[str, str]:
    return {"LEDGERWRIGHT_PYTHON": sys.executable, "LEDGERWRIGHT_REPO": str(REPO_ROOT)}


def sweep_json(sweep: Sweep) -> dict:
    return {
        "name": sweep.name,
        "source": sweep.source,
        "sweep_dir": str(sweep.sweep_dir),
        "grid": sweep.grid,
        "grid_keys": list(sweep.grid),
        "dependency": sweep.dependency,
        "resources": {
            "train": dataclasses.asdict(sweep.train_resources),
            "eval": dataclasses.asdict(sweep.eval_resources),
        },
        "index_columns": ["task_id", "name", "output_dir", "command"],
        "tasks": [
            {
                "task_id": t.index,
                "name": t.name,
                "role": t.role,
                "params": t.params,
                "train_dir": t.train_dir,
                "eval_dir": t.eval_dir,
                "train_command": shlex.join(t.train_command),
                "eval_command": shlex.join(t.eval_command),
            }
            for t in sweep.tasks
        ],
    }


def all_tasks(meta: dict) -> list[dict]:
    """The cells of a ``sweep.json``: this submission's tasks, then those only earlier ones had."""
    return list(meta["tasks"]) + list(meta.get("earlier_tasks", []))


def with_earlier(meta: dict, previous: dict | None) -> dict:
    """``meta`` with the cells of ``previous`` (the sweep.json it replaces) that it does not plan."""
    if not previous:
        return meta
    names = {t["name"] for t in meta["tasks"]}
    earlier = {t["name"]: t for t in all_tasks(previous) if t["name"] not in names}
    return {**meta, "earlier_tasks": [earlier[n] for n in sorted(earlier)]} if earlier else meta


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
