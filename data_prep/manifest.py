"""Manifests: what produced an output, from what, and the digest of every file it wrote.

Every stage writes one next to its output, as its very last act (``write_manifest``: atomic, with
``complete: true``), into a staging directory that replaces the output only when complete
(``staged_output``). A stage that reads an earlier stage's output calls ``require_sealed`` first and
refuses a missing, incomplete or mismatching manifest, or files it does not list. Host and user
names are never recorded.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from data_prep.canonical import digest
from data_prep.inputs import open_regular

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACKED_PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "datasets",
    "bitsandbytes",
    "tokenizers",
    "safetensors",
    "rfc8785",
    "google-re2",
)


class ManifestError(ValueError):
    pass


def code_revision(root: Path = REPO_ROOT) -> dict:
    """Git commit and dirty flag of the code that ran (``unknown`` outside a checkout)."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        return {"revision": rev, "dirty": bool(status.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"revision": "unknown", "dirty": None}


def versions(packages: tuple[str, ...] = TRACKED_PACKAGES) -> dict:
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """sha256 of a regular file (InputError, a ValueError, for FIFOs, devices and /proc)."""
    h = hashlib.sha256()
    with open_regular(path) as fh:
        while block := fh.read(chunk):
            h.update(block)
    return "sha256:" + h.hexdigest()


def file_digests(
    root: Path, *, exclude: tuple[str, ...] = ("manifest.json",), exclude_dirs: tuple[str, ...] = ()
) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative POSIX paths, sorted), skipping ``exclude_dirs``
    (glob patterns of top-level folders, e.g. a checkpoint's intermediate ``checkpoint-*``)."""
    root = Path(root)
    skipped = {p for pattern in exclude_dirs for p in root.glob(pattern) if p.is_dir()}
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in exclude and not any(d in p.parents for d in skipped):
            out[p.relative_to(root).as_posix()] = sha256_file(p)
    return out


def config_hash(config: Any) -> str:
    return digest("config/v1", config)


def build_manifest(
    *,
    stage: str,
    config: Any,
    inputs: dict | None = None,
    outputs: dict | None = None,
    counts: dict | None = None,
    extra: dict | None = None,
) -> dict:
    """A manifest dict with provenance that does not change run to run except for code state.

    No timestamps: same inputs, config and code give the same manifest bytes.
    """
    return {
        "stage": stage,
        "code": code_revision(),
        "versions": versions(),
        "config": config,
        "config_hash": config_hash(config),
        "inputs": inputs or {},
        "outputs": outputs or {},
        "counts": counts or {},
        **(extra or {}),
    }


MANIFEST_NAME = "manifest.json"
FILE_KEYS = ("files", "outputs")  # where a stage's manifest lists its files (synth/import/teacher, build)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``path`` so that it holds either its old bytes or all of ``data``, never a prefix: a
    sibling temporary file, flushed and fsynced, renamed over it. On any error (disk full) the
    temporary is removed and ``path`` is untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_manifest(out_dir: Path, manifest: dict, *, canonical: bool = False) -> Path:
    """Seal a stage's output: ``manifest`` gets ``complete: true`` and is written atomically as the
    very last file of the stage, so a manifest that says complete lists files that were all written.
    ``canonical``: RFC 8785 bytes (synth, importers) instead of indented JSON (build, teacher)."""
    manifest["complete"] = True
    if canonical:
        from data_prep.canonical import dumps_canonical

        data = (dumps_canonical(manifest) + "\n").encode("utf-8")
    else:
        data = (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    path = Path(out_dir) / MANIFEST_NAME
    atomic_write_bytes(path, data)
    return path


def _load_manifest(path: Path) -> dict:
    from data_prep.inputs import InputError, read_bytes

    try:
        manifest = json.loads(read_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: missing manifest") from None
    except InputError as exc:
        if not path.exists() and not path.is_symlink():
            raise ManifestError(f"{path}: missing manifest") from None
        raise ManifestError(f"{path}: unreadable manifest: {exc.problem}") from None
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"{path}: unreadable manifest: {type(exc).__name__}") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{path}: unreadable manifest: not a JSON object")
    return manifest


def _check_files(out_dir: Path, path: Path, manifest: dict, key: str) -> dict:
    files = manifest.get(key, {})
    if not isinstance(files, dict):
        raise ManifestError(f"{path}: {key}: expected an object of file digests")
    for rel, entry in sorted(files.items()):
        want = entry.get("sha256") if isinstance(entry, dict) else entry
        if not isinstance(want, str):
            raise ManifestError(f"{path}: {key}.{rel}: no sha256 digest")
        if not want.startswith("sha256:"):
            want = "sha256:" + want
        f = Path(out_dir) / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise ManifestError(f"{path}: {key}.{rel}: path outside the directory")
        if not f.is_file():
            raise ManifestError(f"{path}: {key}.{rel}: file is missing")
        try:
            got = sha256_file(f)
        except (OSError, ValueError) as exc:
            raise ManifestError(f"{path}: {key}.{rel}: unreadable: {exc}") from None
        if got != want:
            raise ManifestError(
                f"{path}: {key}.{rel}: digest mismatch (file changed after the manifest was written)"
            )
    return files


def check_manifest(out_dir: Path, key: str = "outputs") -> dict:
    """Load ``out_dir/manifest.json`` and verify the digests it lists; raise ManifestError if not.

    ``manifest[key]`` maps relative paths to ``sha256:<hex>`` or to objects with a ``sha256`` field."""
    path = Path(out_dir) / MANIFEST_NAME
    manifest = _load_manifest(path)
    _check_files(out_dir, path, manifest, key)
    return manifest


def require_sealed(
    directory: Path, *, key: str | None = None, ignore: tuple[str, ...] = ()
) -> dict:
    """The manifest of a finished stage output, or ManifestError (``path: problem``).

    Refuses: no manifest; a manifest without ``complete: true`` (a stage killed before its end, or one
    from before seals); any listed file missing or changed; any file present that the manifest does not
    list (a shard added afterwards would be read unsealed) other than the ``sidecars`` it names (the
    teacher's append-only cache). ``key``: where the file digests are
    (default: ``files`` or ``outputs``, whichever the manifest has); ``ignore``: relative path prefixes
    that are not part of the sealed output (caches, locks). This is the one check every consumer runs:
    the build on its corpus, the teacher on its input, the training loader on a data directory."""
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    if not directory.is_dir():
        raise ManifestError(f"{directory}: not a directory")
    manifest = _load_manifest(path)
    if manifest.get("complete") is not True:
        raise ManifestError(
            f"{path}: incomplete output (no complete: true; the stage that wrote it did not finish)"
        )
    if key is None:
        key = next((k for k in FILE_KEYS if isinstance(manifest.get(k), dict)), None)
        if key is None:
            raise ManifestError(f"{path}: lists no files (no files or outputs object)")
    listed = _check_files(directory, path, manifest, key)
    sidecars = manifest.get("sidecars")
    ignore = (*ignore, *(sorted(sidecars) if isinstance(sidecars, dict) else ()))
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if rel == MANIFEST_NAME or rel in listed or p.is_dir() and not p.is_symlink():
            continue
        if any(rel == i or rel.startswith(i.rstrip("/") + "/") for i in ignore):
            continue
        raise ManifestError(f"{directory / rel}: not listed in {path} (added after the output was sealed)")
    return manifest


# ---- staged outputs -------------------------------------------------------------------------------
_PARTIAL = ".partial-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale(final: Path) -> None:
    """Remove staging directories of ``final`` left by processes that are gone (killed builds)."""
    for p in final.parent.glob(f".{final.name}{_PARTIAL}*"):
        try:
            pid = int(p.name[len(final.name) + 1 + len(_PARTIAL) :].split("-")[0])
        except ValueError:
            continue
        if pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def _replace_dir(staged: Path, final: Path) -> None:
    if not final.exists():
        os.rename(staged, final)
        return
    if _exchange(staged, final):
        shutil.rmtree(staged)  # now holds the previous output
        return
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    os.rename(final, old)
    os.rename(staged, final)
    shutil.rmtree(old, ignore_errors=True)


def output_occupied(final: Path) -> bool:
    return final.is_dir() and any(final.iterdir())


def replaceable_output(final: Path) -> bool:
    """Whether a stage that replaces its earlier output (synth, import) may replace ``final``: it is
    absent, empty, or an earlier stage output (it has a manifest.json). A directory of other files is
    never swept away."""
    final = Path(final)
    return not output_occupied(final) or (final / MANIFEST_NAME).is_file()


@contextlib.contextmanager
def staged_output(
    final: Path, *, replace: bool, hint: str = "pass --overwrite to replace it"
) -> Iterator[Path]:
    """Write a stage's output into a fresh sibling directory and move it into place only when the
    block completes: a kill, an exception or a full disk leaves the previous ``final`` as it was (the
    staging directory is removed, or, after SIGKILL, by the next run). ``replace``: whether a
    non-empty ``final`` may be replaced (never deleted before the new output is complete)."""
    final = Path(final)
    if final.is_symlink():
        final = Path(os.path.realpath(final))  # replace what the link points to, keep the link
    if final.exists() and not final.is_dir():
        raise ManifestError(f"{final}: exists and is not a directory")
    if output_occupied(final) and not replace:
        raise ManifestError(f"{final}: output directory is not empty ({hint})")
    final.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale(final)
    staged = Path(tempfile.mkdtemp(prefix=f".{final.name}{_PARTIAL}{os.getpid()}-", dir=final.parent))
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(staged, 0o777 & ~umask)  # mkdtemp makes 0700; the output gets the usual mode
    try:
        yield staged
        _replace_dir(staged, final)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise


@contextlib.contextmanager
def staged_build(
    source: Path,
    out: Path,
    *,
    overwrite: bool,
    allow_unsealed: bool = False,
    ignore: tuple[str, ...] = (),
    error: type[Exception] = ManifestError,
) -> Iterator[Path]:
    """What a consuming stage does around its work: refuse a ``source`` that is not a sealed stage
    output (unless ``allow_unsealed``), then write into a staged directory that replaces ``out`` only
    when the block completes. Problems are raised as ``error`` (the stage's own error type)."""
    if not allow_unsealed:
        try:
            require_sealed(source, ignore=ignore)
        except ManifestError as exc:
            raise error(f"{exc} (refused; --allow-unsealed reads it anyway)") from None
    try:
        with staged_output(out, replace=overwrite) as staged:
            yield staged
    except ManifestError as exc:
        raise error(str(exc)) from None
