"""Plots of the evaluations (PNG, Agg backend, no timestamps in the files): ROC curves with the
baselines, per-type recall, and the policy confusion between decisions and the oracle."""

from __future__ import annotations

from pathlib import Path

MONITOR_STYLE = {
    "reader": ("reader (adapter)", "tab:blue", "-"),
    "base_reader": ("base model, no adapter", "tab:gray", "--"),
    "reconciler": ("reconciler (reference)", "tab:green", ":"),
    "teacher": ("teacher (corpus)", "tab:orange", "-."),
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    _plt().close(fig)
    return Path(path)


def plot_roc(summary: dict, path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 5.2), dpi=110)
    ax.plot([0, 1], [0, 1], color="lightgray", lw=1)
    for name, (label, color, style) in MONITOR_STYLE.items():
        m = summary["monitors"].get(name)
        if not m or not m.get("roc"):
            continue
        xs, ys = zip(*m["roc"])
        a = m["auroc"]
        ci = a["ci"]
        text = f"{label}: AUROC {a['value']:.3f}" if a["value"] is not None else label
        if ci[0] is not None:
            text += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
        ax.plot(xs, ys, color=color, ls=style, lw=1.8, label=text, drawstyle="default")
    ax.set_xlabel("false-positive rate (honest items flagged)")
    ax.set_ylabel("true-positive rate (sabotage caught)")
    ax.set_title(f"Sabotage monitoring ({summary['positives']} pos / {summary['negatives']} neg)")
    ax.set_xlim(-0.01, 1.01)
    ax.set_ylim(-0.01, 1.01)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=8)
    else:
        ax.text(
            0.5, 0.5, "no ROC: positives and negatives are both needed", ha="center", va="center", fontsize=9
        )
    return _save(fig, path)


def plot_recall_by_type(summary: dict, path: Path, fpr: float = 0.05) -> Path:
    """Two panels: recall by the verdict label (flagged = discrepancy or incident), and recall at the
    score threshold set on honest items for ``fpr``; 95% bootstrap intervals as error bars."""
    plt = _plt()
    key = f"{fpr:g}"
    names = [n for n in MONITOR_STYLE if summary["monitors"].get(n)]
    panels = (
        ("by verdict label", lambda m: m["verdict"]["recall_by_type"]),
        (f"at the {fpr:.0%}-FPR score threshold", lambda m: m["operating_points"][key]["recall_by_type"]),
    )
    types = sorted({t for n in names for _, get in panels for t in get(summary["monitors"][n])})
    fig, axes = plt.subplots(2, 1, figsize=(max(7, 1.3 * len(types) + 2), 7.5), dpi=110, sharex=True)
    width = 0.8 / max(1, len(names))
    for ax, (title, get) in zip(axes, panels):
        for j, n in enumerate(names):
            per = get(summary["monitors"][n])
            xs, ys, lo, hi = [], [], [], []
            for i, t in enumerate(types):
                if t not in per:
                    continue
                r = per[t]
                ci = [c if c is not None else r["recall"] for c in r["ci"]]
                xs.append(i + (j - (len(names) - 1) / 2) * width)
                ys.append(r["recall"])
                lo.append(max(0.0, r["recall"] - ci[0]))
                hi.append(max(0.0, ci[1] - r["recall"]))
            label, color, _ = MONITOR_STYLE[n]
            ax.bar(
                xs, ys, width=width, color=color, label=label, yerr=[lo, hi], capsize=2, error_kw={"lw": 0.8}
            )
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("recall")
        ax.set_title(f"Recall per sabotage type, {title}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[-1].set_xticks(range(len(types)))
    axes[-1].set_xticklabels([t.replace("_", "\n") for t in types], fontsize=8)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=8, loc="upper right")
    return _save(fig, path)


def plot_policy_confusion(summary: dict, path: Path) -> Path:
    """One panel per memory condition: rows = executor decision, columns = oracle decision."""
    plt = _plt()
    conds = [c for c, v in summary["conditions"].items() if v is not None]
    fig, axes = plt.subplots(1, len(conds), figsize=(3.3 * len(conds) + 0.6, 3.8), dpi=110, squeeze=False)
    for ax, cond in zip(axes[0], conds):
        conf = summary["conditions"][cond]["confusion"]
        rows, cols = conf["decisions"], conf["oracle"]
        grid = conf["counts"]
        ax.imshow(grid, cmap="Blues", aspect="auto")
        for i in range(len(rows)):
            for j in range(len(cols)):
                ax.text(j, i, str(grid[i][j]), ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels([c.replace("_", "\n") for c in cols], fontsize=7)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows, fontsize=7)
        ax.set_xlabel("oracle")
        ax.set_title(cond.replace("_", " "), fontsize=9)
    axes[0][0].set_ylabel("decision")
    fig.suptitle(f"Policy decisions vs oracle (executor: {summary['executor']})", fontsize=10)
    return _save(fig, path)
