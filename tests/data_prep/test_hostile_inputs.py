"""The whole hostile set through verify, build and importer: exit 1, the file named, no traceback,
no hang (each file under a 20 s deadline), and verify and build agree that none of it is valid."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hostile import DEADLINE_S, make_hostile

HELPER = Path(__file__).resolve().parents[1] / "helpers" / "hostile.py"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("hostile")
    paths = make_hostile(root / "files")
    (root / "index.json").write_text(json.dumps({k: str(v) for k, v in paths.items()}))
    return root, paths


@pytest.mark.parametrize("tool", ["verify", "importer", "build"])
def test_every_hostile_file_is_refused_by_name(hostile, tool):
    root, paths = hostile
    assert len(paths) >= 60
    result = root / f"{tool}.json"
    env_path = f"{REPO / 'tests' / 'helpers'}"
    proc = subprocess.run(
        [sys.executable, str(HELPER), tool, str(root), str(result)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S * 3 + 4 * len(paths),
        cwd=REPO,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "HOME": str(root)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(result.read_text())
    assert set(res) == set(paths)
    tracebacks = {n: r["traceback"] for n, r in res.items() if r["traceback"]}
    hangs = [n for n, r in res.items() if r["hang"]]
    not_refused = {n: (r["rc"], r["stderr"][-300:]) for n, r in res.items() if r["rc"] != 1}
    unnamed = {n: r["stderr"][-300:] for n, r in res.items() if not r["named"]}
    assert not tracebacks, tracebacks
    assert not hangs, hangs
    assert not not_refused, not_refused
    assert not unnamed, unnamed
    assert max(r["seconds"] for r in res.values()) < DEADLINE_S
    for r in res.values():
        assert "Traceback" not in r["stderr"]
