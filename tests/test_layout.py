"""The project's layout rules: stdlib names are never shadowed; packages import one way."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("data_prep", "sanitizer", "train", "eval")


def _modules():
    for pkg in PACKAGES:
        yield from (ROOT / pkg).rglob("*.py")


def test_no_module_shadows_the_standard_library():
    stdlib = set(sys.stdlib_module_names)
    bad = [str(p.relative_to(ROOT)) for p in _modules() if p.stem in stdlib]
    bad += [
        str(p.relative_to(ROOT))
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*")
        if p.is_dir() and p.name in stdlib
    ]
    assert bad == []


def test_imports_flow_one_way():
    allowed = {
        "sanitizer": {"sanitizer"},
        "data_prep": {"data_prep", "sanitizer"},
        "train": {"train", "data_prep", "sanitizer"},
        "eval": {"eval", "train", "data_prep", "sanitizer"},
    }
    problems = []
    for path in _modules():
        pkg = path.relative_to(ROOT).parts[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in PACKAGES and top not in allowed[pkg]:
                    problems.append(f"{path.relative_to(ROOT)} imports {name}")
    assert problems == []
