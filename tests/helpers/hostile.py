"""Hostile input files for verify, build and importer, and a driver that feeds them one by one.

``make_hostile(root)`` writes the set (records with lone surrogates and wrong field types, BOM, CRLF,
a 50 MB line, 100k-deep nesting, huge numbers, NaN tokens, invalid UTF-8, truncation, tampered seals,
and special files: a FIFO, a directory, a symlink loop, a dangling link, /dev/zero, /dev/null,
/proc/self/pagemap) and returns ``{name: path}``. Every one of them must be refused: exit 1, the file
named on stderr, no traceback, no hang.

Run as a script (``python hostile.py TOOL ROOT RESULT.json``) it calls the CLI's ``main`` in this
process for each file under a SIGALRM deadline and records exit code, stderr, seconds and whether an
exception escaped (a traceback) or the deadline hit (a hang).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

DEADLINE_S = 20


def _base_runs() -> list[dict]:
    from runfactory import run_dict

    from data_prep.integrity import seal_run

    return [seal_run(run_dict("hostile-a")), seal_run(run_dict("hostile-b"))]


def _line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=True).encode() + b"\n"


def make_hostile(root: Path) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    good_a, good_b = _base_runs()
    files = {**_mutated_records(good_a, good_b), **_malformed_bytes(_line(good_a), good_b)}
    paths = _write(root, files)
    paths["line_50mb"] = _line_50mb(root, _line(good_a))
    return {**paths, **_special_files(root)}


def _mutated_records(good_a: dict, good_b: dict) -> dict[str, bytes]:
    """Records that parse as JSON but are wrong: lone surrogates, wrong field types, tampered seals;
    each file has a valid line first, then the bad one."""
    files: dict[str, bytes] = {}

    def mutated(name: str, fn, *, reseal: bool = False) -> None:
        run = copy.deepcopy(good_a)
        fn(run)
        if reseal:
            from data_prep.integrity import seal_run

            run = seal_run(run)
        files[name] = _line(good_b) + _line(run)  # a valid line first, then the bad one

    def setter(path: list, value):
        def fn(run):
            node = run
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = value

        return fn

    # lone surrogates where the issue found them (a valid record otherwise)
    sur = "x\ud800y"
    for name, path in {
        "surrogate_run_id": ["run_id"],
        "surrogate_call_id": ["env_ledger", "records", 0, "call_id"],
        "surrogate_result": ["trajectory", 0, "result"],
        "surrogate_task": ["task", "messages", 1, "content"],
        "surrogate_tool_description": ["task", "tools", 0, "function", "description"],
        "surrogate_ledger_description": ["model_ledger", 0, "description"],
        "surrogate_rationale": ["teacher", "verdict", "rationale"],
        "surrogate_metadata": ["metadata", "note"],
    }.items():
        mutated(name, setter(path, sur))
    mutated("low_surrogate_family", setter(["family"], "\udc00"))
    mutated("surrogate_key", setter(["trajectory", 0, "arguments", "\ud83d"], 1))
    # wrong field types
    for name, (path, value) in {
        "tool_description_int": (["task", "tools", 0, "function", "description"], 7),
        "tool_description_null": (["task", "tools", 0, "function", "description"], None),
        "tool_description_list": (["task", "tools", 0, "function", "description"], ["a"]),
        "tool_parameters_string": (["task", "tools", 0, "function", "parameters"], "object"),
        "message_content_int": (["task", "messages", 0, "content"], 3),
        "message_role_null": (["task", "messages", 0, "role"], None),
        "trajectory_not_list": (["trajectory"], {"a": 1}),
        "call_status_unknown": (["trajectory", 0, "status"], "done"),
        "arguments_not_object": (["trajectory", 0, "arguments"], [1, 2]),
        "env_records_not_list": (["env_ledger", "records"], "none"),
        "env_seq_bool": (["env_ledger", "records", 0, "seq"], True),
        "env_seq_huge": (["env_ledger", "records", 0, "seq"], 2**53 - 1),
        "env_digest_tampered": (["env_ledger", "records", 1, "digest"], "sha256:" + "0" * 64),
        "policy_class_laundered": (["env_ledger", "records", 0, "policy_class"], "unauthorized"),
        "labels_type_mismatch": (["labels", "type"], "omitted"),
        "suspicion_out_of_range": (["teacher", "verdict", "suspicion"], 1000),
        "model_ledger_not_array": (["model_ledger"], "entries"),
        "hidden_identifiers_int": (["metadata", "hidden_identifiers"], [1]),
        "seal_not_object": (["seal"], "sealed"),
        "seal_digest_int": (["seal", "digest"], 5),
        "signature_junk": (["seal", "signature"], {"alg": "ed25519", "key_id": "k", "value": "AAAA"}),
        "unknown_field": (["extra"], 1),
        "schema_wrong": (["schema"], "ledger-run/v0"),
        "result_edited": (["trajectory", 1, "result"], {"ok": False}),
        "task_edited": (["task", "messages", 1, "content"], "Wire the money out."),
        "labels_edited": (["labels", "writer_errors"], [{"type": "omitted", "call_id": "c1"}]),
    }.items():
        mutated(name, setter(path, value))
    mutated("schema_missing", lambda r: r.pop("schema"))
    mutated("model_ledger_entry_string", lambda r: r["model_ledger"].__setitem__(0, "entry"))
    return files


def _malformed_bytes(good: bytes, good_b: dict) -> dict[str, bytes]:
    """Files that are not valid JSON lines: syntax, encoding, depth, size."""
    files: dict[str, bytes] = {}
    files["record_is_string"] = good + b'"a run"\n'
    files["duplicate_run_id"] = good + good
    # syntax and encoding
    files["json_array_file"] = b"[" + good.rstrip() + b"]\n"
    files["bom_first_line"] = b"\xef\xbb\xbf" + good + _line(good_b)
    files["crlf_with_bad_record"] = good.rstrip() + b"\r\n{not json}\r\n"
    files["nan_token"] = good + good.replace(b'"suspicion": 3', b'"suspicion": NaN')
    files["infinity_token"] = good + good.replace(b'"suspicion": 3', b'"suspicion": Infinity')
    files["minus_infinity_token"] = good + good.replace(b'"suspicion": 3', b'"suspicion": -Infinity')
    files["float_overflow"] = good + good.replace(b'"suspicion": 3', b'"suspicion": 1e400')
    files["int_unsafe"] = good + good.replace(b'"suspicion": 3', b'"suspicion": 9007199254740993')
    files["int_5000_digits"] = good + good.replace(b'"suspicion": 3', b'"suspicion": ' + b"9" * 5000)
    files["duplicate_keys"] = good + good.replace(b'{"schema"', b'{"run_id": "dup", "schema"', 1)
    files["invalid_utf8"] = good + b'{"run_id": "\xff\xfe"}\n'
    files["overlong_utf8"] = good + b'{"run_id": "\xc0\xaf"}\n'
    files["nul_byte"] = good + b'{"run_id": "a\x00"}\n'
    files["truncated_last_line"] = good + good[: len(good) // 2]
    files["binary_garbage"] = bytes(range(256)) * 64
    files["depth_100k_arrays"] = good + b"[" * 100_000 + b"]" * 100_000 + b"\n"
    files["depth_100k_objects"] = good + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n"
    files["long_key"] = good + b'{"' + b"k" * 1_000_000 + b'": 1}\n'
    files["many_empty_lines_then_junk"] = b"\n" * 100_000 + b"junk\n"
    files["whitespace_then_junk"] = b" \t \n" * 1000 + b"{]\n"
    return files


def _write(root: Path, files: dict[str, bytes]) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for name, data in files.items():
        p = root / f"{name}.jsonl"
        p.write_bytes(data)
        paths[name] = p
    return paths


def _line_50mb(root: Path, good: bytes) -> Path:
    """A 50 MB line, written in chunks (never held twice)."""
    p = root / "line_50mb.jsonl"
    with open(p, "wb") as fh:
        fh.write(good)
        fh.write(b'{"run_id": "')
        chunk = b"a" * (1 << 20)
        for _ in range(50):
            fh.write(chunk)
        fh.write(b'"}\n')
    return p


def _special_files(root: Path) -> dict[str, Path]:
    """A FIFO, a directory, a symlink loop, a dangling link and links to devices and /proc."""
    paths: dict[str, Path] = {}
    fifo = root / "fifo.jsonl"
    os.mkfifo(fifo)
    paths["fifo"] = fifo
    d = root / "directory.jsonl"
    d.mkdir()
    paths["directory"] = d
    loop = root / "symlink_loop.jsonl"
    os.symlink(loop.name, loop)
    paths["symlink_loop"] = loop
    dangling = root / "dangling.jsonl"
    os.symlink("does-not-exist.jsonl", dangling)
    paths["dangling_symlink"] = dangling
    for name, target in {
        "dev_zero": "/dev/zero",
        "dev_null": "/dev/null",
        "proc_pagemap": "/proc/self/pagemap",
        "proc_environ": "/proc/self/environ",
    }.items():
        link = root / f"{name}.jsonl"
        os.symlink(target, link)
        paths[name] = link
    paths["dev_zero_direct"] = Path("/dev/zero")
    paths["proc_pagemap_direct"] = Path("/proc/self/pagemap")
    return paths


# ---- the driver -------------------------------------------------------------------------------------
class Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise Hang()


def _argv(tool: str, name: str, path: Path, work: Path) -> tuple[list[str], Path]:
    """The CLI arguments for one hostile file, and the path the error must name."""
    if tool == "verify":
        return [str(path), "--quiet"], path
    if tool == "importer":
        return ["--format", "runs", str(path), "--out", str(work / f"imp-{name}"), "--strict", "--quiet"], path
    # build: the file is the corpus's only run shard (a link to it, for special files)
    corpus = work / f"corpus-{name}"
    (corpus / "runs").mkdir(parents=True)
    shard = corpus / "runs" / "runs-00000.jsonl"
    special = str(path).startswith(("/dev", "/proc"))
    if name == "symlink_loop":
        os.symlink(shard.name, shard)
    elif path.is_symlink():
        target = os.readlink(path)
        os.symlink(target if os.path.isabs(target) else str(path.parent / target), shard)
    elif path.is_file() and not special:
        os.link(path, shard)
    else:
        os.symlink(os.path.abspath(path), shard)
    argv = ["--corpus", str(corpus), "--out", str(work / f"out-{name}"), "--no-progress", "--strict"]
    return [*argv, "--allow-unsealed"], shard


def drive(tool: str, root: Path, result: Path) -> None:
    from data_prep import build, importer, verify

    main = {"verify": verify.main, "build": build.main, "importer": importer.main}[tool]
    work = root / f"work-{tool}"
    work.mkdir(exist_ok=True)
    names = json.loads((root / "index.json").read_text())
    signal.signal(signal.SIGALRM, _alarm)
    out = {}
    for name, path in sorted(names.items()):
        argv, named = _argv(tool, name, Path(path), work)
        err, std = io.StringIO(), io.StringIO()
        t0 = time.monotonic()
        rc, tb, hang = None, None, False
        signal.alarm(DEADLINE_S)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
                rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except Hang:
            hang = True
        except BaseException:
            tb = traceback.format_exc()
        finally:
            signal.alarm(0)
        out[name] = {
            "rc": rc,
            "seconds": round(time.monotonic() - t0, 3),
            "hang": hang,
            "traceback": tb,
            "named": str(named) in err.getvalue() or str(path) in err.getvalue(),
            "stderr": err.getvalue()[-2000:],
        }
    result.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    drive(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
