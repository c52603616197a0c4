"""Collect a sweep's results into one table and a scaling plot.

    python slurm/aggregate.py SWEEP_DIR [--out DIR] [--strict]

Reads ``SWEEP_DIR/sweep.json`` (written by submit.py) and, for every task, the checkpoint's
``manifest.json``, the evaluation's ``summary.json`` and the task runner's status files. Writes to
``SWEEP_DIR/aggregate/`` (or ``--out``):

- ``results.csv``: one row per task - grid values, state, training results (steps, losses, tokens,
  seconds, the checkpoint it resumed from) and every numeric evaluation metric (a ``{value, ci}``
  metric becomes ``<path>`` plus ``<path>.ci_lo``/``<path>.ci_hi``);
- ``results.md``: the same table with the headline columns, then the tasks that are missing or failed
  (with the reason and the log to read) - they are listed, never dropped;
- ``scaling.png``: each headline metric against the number of examples, mean and spread (min-max band,
  standard deviation as error bars) over seeds, one line per other grid value (e.g. role);
- ``aggregate.json``: the rows and the list of problems.

Exit status 0; with ``--strict`` 1 when any task is missing or failed.
"""

from __future__ import annotations

import csv
import json
import math
import shlex
import sys
from collections import defaultdict
from pathlib import Path

from data_prep.yaml_config import strict_parser

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweeplib import all_tasks, chain_parts, out_of  # noqa: E402
from task_runner import find_summary, status_path  # noqa: E402

TRAIN_FIELDS = {
    "global_step": ("results", "global_step"),
    "train_loss_final": ("results", "train_loss_final"),
    "eval_loss_initial": ("results", "eval_loss_initial"),
    "eval_loss_final": ("results", "eval_loss_final"),
    "examples_used": ("examples",),
    "tokens_seen": ("tokens_seen",),
    "train_seconds": ("train_seconds",),
    "resumed_from": ("resumed_from",),
    "world_size": ("world_size",),
}
# the figures a person looks at first, per evaluation (summary["eval"]); others: a generic choice
HEADLINES = {
    "policy_reuse": [
        "conditions.writer.rates.authorized_use",
        "conditions.writer.rates.unauthorized_submission",
        "conditions.writer.oracle_agreement",
        "memory.writer.exact",
        "conditions.writer.rates.invalid",
    ],
    "sabotage": [
        "monitors.reader.auroc",
        "monitors.reader.verdict.tpr",
        "monitors.reader.verdict.fpr",
        "writer.adapter.parse_rate",
        "writer.adapter.content_agreement",
    ],
}
SKIP_KEYS = {"ci", "roc", "k", "per_item", "items", "config", "versions", "code", "hardware", "outputs"}
MAX_PLOTS = 6


def _get(d: dict, path: tuple[str, ...]):
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _is_num(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def flatten_metrics(summary: dict, prefix: str = "", depth: int = 0) -> tuple[dict, list[str]]:
    """(every numeric metric by dotted path, the headline ones). A ``{value, ci}`` dict is a metric
    (its interval becomes ``.ci_lo``/``.ci_hi``); counts such as ``n`` are kept but are not headlines."""
    out: dict[str, float] = {}
    headline: list[str] = []
    if depth > 5 or not isinstance(summary, dict):
        return out, headline
    for key, value in summary.items():
        path = f"{prefix}{key}"
        if key in SKIP_KEYS:
            continue
        if (
            isinstance(value, dict)
            and "value" in value
            and (value["value"] is None or _is_num(value["value"]))
        ):
            if _is_num(value["value"]):
                out[path] = float(value["value"])
                if depth <= 2:
                    headline.append(path)
            ci = value.get("ci")
            if isinstance(ci, list) and len(ci) == 2 and all(_is_num(c) for c in ci):
                out[f"{path}.ci_lo"], out[f"{path}.ci_hi"] = float(ci[0]), float(ci[1])
        elif isinstance(value, dict):
            sub, sub_head = flatten_metrics(value, f"{path}.", depth + 1)
            out.update(sub)
            headline += sub_head
        elif _is_num(value):
            out[path] = float(value)
            if depth <= 1 and not (key == "n" or key.startswith("n_") or key.endswith("_count")):
                headline.append(path)
    return out, headline


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _log_hint(sweep_dir: Path, kind: str, status: dict | None, task_id: int) -> str:
    job = None
    if status and status.get("attempts"):
        job = status["attempts"][-1].get("slurm_job")
    if job and "_" in job:
        return str(sweep_dir / "logs" / f"{kind}_{job}.out")
    logs = (
        sorted((sweep_dir / "logs").glob(f"{kind}_*_{task_id}.out")) if (sweep_dir / "logs").is_dir() else []
    )
    return str(logs[-1]) if logs else f"{sweep_dir / 'logs'}/{kind}_<job>_{task_id}.out"


def _state(kind: str, complete: bool, status: dict | None) -> tuple[str, str]:
    """(state, reason) of one side (train or eval) of a task."""
    if complete:
        return "done", ""
    if status is None:
        return (
            "missing",
            f"{kind}: never started (no status file; cancelled, still pending, or not submitted)",
        )
    att = status.get("attempts", [{}])[-1]
    st = att.get("state", "unknown")
    if st == "running":
        return "running", f"{kind}: running or killed without a trace (attempt {att.get('attempt')})"
    if st == "failed":
        return "failed", f"{kind}: failed with exit {att.get('rc')}"
    if st in ("requeued", "stopped"):
        return st, f"{kind}: {st} by {att.get('signal')} and not finished"
    return st, f"{kind}: {st}, output incomplete"


def eval_summaries(eval_command: str, eval_dir: Path) -> list[Path | None]:
    """The summary of each script of a task's evaluation (several when its command chains them)."""
    parts = chain_parts(shlex.split(eval_command)) or [[]]
    return [find_summary(Path(out_of(p, str(eval_dir)))) for p in parts]


def collect(sweep_dir: Path) -> tuple[list[dict], list[str], list[str], list[str]]:
    """(rows, grid keys, metric columns, headline metric columns)."""
    meta = _read_json(sweep_dir / "sweep.json")
    if meta is None:
        raise SystemExit(
            f"error: {sweep_dir}/sweep.json not found or unreadable (is this a sweep directory "
            "written by slurm/submit.py?)"
        )
    grid_keys = list(meta.get("grid_keys") or meta["grid"])
    rows: list[dict] = []
    metric_cols: list[str] = []
    headline: list[str] = []
    for t in all_tasks(meta):
        tid = t["task_id"]
        train_dir, eval_dir = Path(t["train_dir"]), Path(t["eval_dir"])
        manifest = _read_json(train_dir / "manifest.json")
        summary_paths = eval_summaries(t.get("eval_command", ""), eval_dir)
        summaries = [_read_json(p) if p else None for p in summary_paths]
        summary = None if any(x is None for x in summaries) else summaries
        t_status = _read_json(status_path(sweep_dir, "train", t["name"]))
        e_status = _read_json(status_path(sweep_dir, "eval", t["name"]))
        t_state, t_reason = _state("train", manifest is not None, t_status)
        e_state, e_reason = _state("eval", summary is not None, e_status)
        row: dict = {"task_id": tid, "name": t["name"]}
        for k in grid_keys:
            row[k] = t["params"].get(k)
        if t_state == "done" and e_state == "done":
            row["state"] = "ok"
            row["problem"] = ""
        else:
            row["state"] = f"train {t_state}, eval {e_state}"
            bits = []
            if t_state != "done":
                bits.append(f"{t_reason} (log {_log_hint(sweep_dir, 'train', t_status, tid)})")
            if e_state != "done":
                if t_state != "done" and e_status is None:
                    bits.append("eval: not run (no checkpoint)")
                else:
                    bits.append(f"{e_reason} (log {_log_hint(sweep_dir, 'eval', e_status, tid)})")
            row["problem"] = "; ".join(bits)
        for col, path in TRAIN_FIELDS.items():
            row[col] = _get(manifest, path) if manifest else None
        row["checkpoint"] = str(train_dir) if manifest else None
        row["eval_summary"] = ";".join(str(p) for p in summary_paths) if summary else None
        for one in summary or []:
            metrics, head = flatten_metrics(one)
            if one.get("eval") in HEADLINES:
                head = [h for h in HEADLINES[one["eval"]] if h in metrics]
            for k, v in metrics.items():
                row[f"eval.{k}"] = v
                if f"eval.{k}" not in metric_cols:
                    metric_cols.append(f"eval.{k}")
            for h in head:
                if f"eval.{h}" not in headline:
                    headline.append(f"eval.{h}")
        rows.append(row)
    return rows, grid_keys, metric_cols, headline


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in columns})


def write_markdown(
    path: Path, name: str, rows: list[dict], columns: list[str], problems: list[dict], plot: Path | None
) -> None:
    lines = [f"# Sweep {name}: {len(rows)} tasks, {len(rows) - len(problems)} complete", ""]
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)).replace("|", "\\|") for c in columns) + " |")
    lines.append("")
    if problems:
        lines.append(f"## Missing or failed ({len(problems)})")
        lines.append("")
        for r in problems:
            lines.append(f"- task {r['task_id']} `{r['name']}`: {r['state']} - {r['problem']}")
    else:
        lines.append("Every task trained and was evaluated.")
    if plot is not None:
        lines += ["", f"![metrics against examples]({plot.name})"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def plot_scaling(
    path: Path, name: str, rows: list[dict], grid_keys: list[str], metrics: list[str]
) -> Path | None:
    """Each metric against examples: mean over seeds (line), std (error bars), min-max (band)."""
    if "examples" not in grid_keys or not metrics:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    group_keys = [k for k in grid_keys if k not in ("examples", "seed")]
    ok = [r for r in rows if r["state"] == "ok"]
    if not ok:
        return None
    n = len(metrics)
    cols = min(3, n)
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.6 * nrows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        groups: dict[tuple, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in ok:
            v = r.get(metric)
            if _is_num(v) and _is_num(r.get("examples")):
                groups[tuple(r.get(k) for k in group_keys)][float(r["examples"])].append(float(v))
        for g, by_x in sorted(groups.items(), key=lambda kv: str(kv[0])):
            xs = sorted(by_x)
            mean = [sum(by_x[x]) / len(by_x[x]) for x in xs]
            std = [math.sqrt(sum((v - m) ** 2 for v in by_x[x]) / len(by_x[x])) for x, m in zip(xs, mean)]
            lo = [min(by_x[x]) for x in xs]
            hi = [max(by_x[x]) for x in xs]
            label = ", ".join(f"{k}={v}" for k, v in zip(group_keys, g)) or None
            line = ax.errorbar(xs, mean, yerr=std, marker="o", capsize=3, label=label)
            ax.fill_between(xs, lo, hi, alpha=0.15, color=line[0].get_color())
            for x in xs:
                ax.scatter([x] * len(by_x[x]), by_x[x], s=8, alpha=0.5, color=line[0].get_color())
        xs_all = sorted({float(r["examples"]) for r in ok if _is_num(r.get("examples"))})
        if len(xs_all) > 1 and xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 4:
            ax.set_xscale("log")
        ax.set_xticks(xs_all)
        ax.set_xticklabels([f"{x:g}" for x in xs_all])
        ax.set_xticks([], minor=True)  # a log axis's minor labels (6x10^1) would overprint the budgets
        ax.set_xlabel("training examples")
        ax.set_title(metric.removeprefix("eval."), fontsize=9)
        ax.grid(alpha=0.3)
        if any(h.get_label() and not h.get_label().startswith("_") for h in ax.get_lines()) and group_keys:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    seeds = sorted({r.get("seed") for r in ok if "seed" in r})
    fig.suptitle(
        f"{name}: mean over seeds {seeds} (bars: std, band: min-max); {len(ok)}/{len(rows)} tasks",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def aggregate(sweep_dir: Path, out: Path | None = None) -> dict:
    sweep_dir = Path(sweep_dir).resolve()
    out = Path(out) if out else sweep_dir / "aggregate"
    out.mkdir(parents=True, exist_ok=True)
    meta = _read_json(sweep_dir / "sweep.json") or {}
    name = meta.get("name", sweep_dir.name)
    rows, grid_keys, metric_cols, headline = collect(sweep_dir)
    rows.sort(key=lambda r: r["task_id"])
    base = ["task_id", "name", *grid_keys, "state"]
    train_cols = list(TRAIN_FIELDS)
    columns = [*base, *train_cols, *metric_cols, "checkpoint", "eval_summary", "problem"]
    problems = [r for r in rows if r["state"] != "ok"]
    plot_metrics = ["eval_loss_final", *headline][:MAX_PLOTS]
    plot = plot_scaling(out / "scaling.png", name, rows, grid_keys, plot_metrics)
    write_csv(out / "results.csv", rows, columns)
    md_cols = [*base, "global_step", "train_loss_final", "eval_loss_final", "resumed_from", *headline]
    write_markdown(out / "results.md", name, rows, md_cols, problems, plot)
    result = {
        "sweep": name,
        "sweep_dir": str(sweep_dir),
        "rows": rows,
        "columns": columns,
        "headline": headline,
        "problems": [{k: r[k] for k in ("task_id", "name", "state", "problem")} for r in problems],
        "files": {
            "csv": str(out / "results.csv"),
            "markdown": str(out / "results.md"),
            "plot": str(plot) if plot else None,
        },
    }
    (out / "aggregate.json").write_text(
        json.dumps(result, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8"
    )
    return result


def main(argv: list[str] | None = None) -> int:
    p = strict_parser(prog="slurm/aggregate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", type=Path, help="the sweep directory (holds sweep.json)")
    p.add_argument("--out", type=Path, help="where to write the table and plot (default SWEEP_DIR/aggregate)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a task is missing or failed")
    args = p.parse_args(argv)
    res = aggregate(args.sweep_dir, args.out)
    n, bad = len(res["rows"]), res["problems"]
    print(f"{res['sweep']}: {n - len(bad)}/{n} tasks complete")
    for b in bad:
        print(f"  task {b['task_id']} {b['name']}: {b['state']} - {b['problem']}")
    for kind, path in res["files"].items():
        if path:
            print(f"{kind}: {path}")
    return 1 if (args.strict and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
