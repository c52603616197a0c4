"""The eval entry scripts run by path put eval/ first on sys.path: no module there may shadow the
standard library or an installed package (eval/yaml.py would break every import of yaml)."""

import importlib.util
import sys
from pathlib import Path

EVAL = Path(__file__).resolve().parents[2] / "eval"


def test_eval_modules_shadow_nothing():
    names = [p.stem for p in EVAL.glob("*.py") if p.stem != "__init__"]
    assert {
        "sabotage",
        "policy_reuse",
        "metrics",
        "generation",
        "injection",
        "rundir",
        "plots",
        "report",
    } <= set(names)
    bad = []
    for name in names:
        if name in sys.stdlib_module_names:
            bad.append(f"{name} (standard library)")
            continue
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and Path(spec.origin).resolve().parent != EVAL:
            bad.append(f"{name} (installed at {spec.origin})")
    assert bad == []
