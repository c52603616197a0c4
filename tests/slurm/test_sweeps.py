"""Sweep expansion and the generated sbatch text (dry runs; no cluster needed)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import submit
import sweeplib
from sweeplib import SweepError, directives_of, load_sweep, read_index

REPO = Path(__file__).resolve().parents[2]
SWEEPS = REPO / "configs" / "sweeps"
GPU_SWEEPS = ["gemma3-writer-scaling.yaml", "nemo-writer-scaling.yaml"]


def plan(name: str, tmp_path: Path, sets=None) -> submit.Plan:
    return submit.Plan(load_sweep(SWEEPS / name, out=tmp_path / "sweep", sets=sets or []))


def opts(text: str) -> list[str]:
    return directives_of(text)


# ---- shipped sweeps -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(p.name for p in SWEEPS.glob("*.yaml")))
def test_every_shipped_sweep_expands(name, tmp_path):
    s = load_sweep(SWEEPS / name, out=tmp_path)
    assert s.n == len(s.tasks) > 0
    assert len({t.name for t in s.tasks}) == s.n
    for t in s.tasks:
        assert t.train_command[:2] == ["accelerate", "launch"]
        assert t.train_command[-2:] == ["--output-dir", t.train_dir]
        for part in sweeplib.chain_parts(t.eval_command):
            assert part[-2] == "--out" and Path(part[-1]).is_relative_to(t.eval_dir)
            assert "--writer" in part


def test_the_experiment_sweeps(tmp_path):
    """filter-ablation: writer and reader x filtered/unfiltered data, one budget, 3 seeds; data-scaling:
    4 budgets x 3 seeds; each cell runs sabotage then policy reuse into eval/<script>."""
    fa = load_sweep(
        SWEEPS / "filter-ablation.yaml", out=tmp_path / "fa", sets=[("train.args.cache_dir", "/c")]
    )
    assert fa.grid == {
        "role": ["writer", "reader"],
        "data": ["default", "unfiltered"],
        "examples": [561],
        "seed": [0, 1, 2],
    }
    by = {t.name: t for t in fa.tasks}
    assert "--data-dir" not in by["writer-default-e561-s0"].train_command
    tc = by["reader-unfiltered-e561-s1"].train_command
    assert tc[tc.index("--data-dir") + 1] == "/c/sft-unfiltered" and "train/reader.py" in tc
    sab, pol = sweeplib.chain_parts(by["reader-unfiltered-e561-s1"].eval_command)
    ckpt = by["reader-unfiltered-e561-s1"].train_dir
    assert sab[1] == "eval/sabotage.py" and sab[sab.index("--reader") + 1] == ckpt
    assert pol[1] == "eval/policy_reuse.py" and pol[pol.index("--executor") + 1] == ckpt
    assert "--no-base-reader" in sab and "--no-base-reader" not in pol and "--no-base-writer" in pol
    sab, pol = sweeplib.chain_parts(by["writer-default-e561-s0"].eval_command)
    assert sab[sab.index("--reader") + 1] == "ckpt-reader/" and pol[pol.index("--executor") + 1] == "rules"
    ds = load_sweep(SWEEPS / "data-scaling.yaml", out=tmp_path / "ds")
    assert ds.grid == {"role": ["writer"], "examples": [64, 128, 256, 561], "seed": [0, 1, 2]}


def test_unknown_data_preset_is_named(tmp_path):
    with pytest.raises(SweepError, match=r"grid.data: no data preset configs/data/nope.yaml"):
        load_sweep(SWEEPS / "data-scaling.yaml", out=tmp_path, sets=[("grid.data", ["nope"])])


def test_the_shipped_grids():
    g = load_sweep(SWEEPS / "gemma3-writer-scaling.yaml")
    assert g.grid == {"role": ["writer"], "examples": [140, 280, 561, 1122], "seed": [0, 1, 2]}
    assert g.n == 12
    assert load_sweep(SWEEPS / "nemo-writer-scaling.yaml").n == 12
    tiny = load_sweep(SWEEPS / "tiny-cpu.yaml")
    assert tiny.n == 4 and len(tiny.grid["examples"]) == 2 and len(tiny.grid["seed"]) == 2
    assert tiny.train_resources.gpus == 0 and tiny.train_resources.partition == "debug"


def test_train_commands_use_the_presets(tmp_path):
    s = load_sweep(SWEEPS / "gemma3-writer-scaling.yaml", out=tmp_path)
    cmd = s.tasks[0].train_command
    assert cmd[:5] == [
        "accelerate",
        "launch",
        "--config_file",
        "configs/accelerate/ddp_4gpu.yaml",
        "train/writer.py",
    ]
    assert cmd[cmd.index("--config") + 1] == "configs/train/gemma-3-12b.yaml"
    assert (cmd[cmd.index("--examples") + 1], cmd[cmd.index("--seed") + 1]) == ("140", "0")
    nemo = load_sweep(SWEEPS / "nemo-writer-scaling.yaml", out=tmp_path).tasks[-1].train_command
    assert nemo[nemo.index("--config") + 1] == "configs/train/mistral-nemo-12b.yaml"
    assert (nemo[nemo.index("--examples") + 1], nemo[nemo.index("--seed") + 1]) == ("1122", "2")
    for path in (
        "configs/accelerate/ddp_4gpu.yaml",
        "configs/train/gemma-3-12b.yaml",
        "configs/train/mistral-nemo-12b.yaml",
    ):
        assert (REPO / path).is_file(), path


def test_train_flags_exist_in_the_recipe(tmp_path):
    """Every flag a sweep passes to train/writer.py is one the recipe's parser accepts."""
    from train.config import build_parser

    parser = build_parser("writer")
    known = {a for action in parser._actions for a in action.option_strings}
    for name in sorted(p.name for p in SWEEPS.glob("*.yaml")):
        for t in load_sweep(SWEEPS / name, out=tmp_path).tasks:
            cmd = t.train_command
            args = cmd[cmd.index(f"train/{t.role}.py") + 1 :]
            assert {a for a in args if a.startswith("--")} <= known, name


def test_a_misspelled_override_fails_at_submit_time(tmp_path):
    """``--set train.args.lerning_rate=1`` names the flag and stops before anything is written."""
    with pytest.raises(SweepError, match=r"train flags: unrecognized arguments: --lerning-rate 1"):
        load_sweep(SWEEPS / "data-scaling.yaml", out=tmp_path, sets=[("train.args.lerning_rate", 1)])
    with pytest.raises(SweepError, match=r"train flags: .*report_to"):
        load_sweep(SWEEPS / "data-scaling.yaml", out=tmp_path, sets=[("train.args.report_to", "mlflow")])
    proc = subprocess.run(
        [sys.executable, str(REPO / "slurm/submit.py"), str(SWEEPS / "data-scaling.yaml"), "--out",
         str(tmp_path / "x"), "--set", "train.args.lerning_rate=1", "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "--lerning-rate" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists()
    ok = load_sweep(SWEEPS / "data-scaling.yaml", out=tmp_path, sets=[("train.args.learning_rate", 1e-4)])
    assert all("--learning-rate" in t.train_command for t in ok.tasks)


def test_eval_flags_exist_in_the_eval_scripts(tmp_path):
    for script in ("policy_reuse", "sabotage"):
        if not (REPO / "eval" / f"{script}.py").is_file():
            pytest.skip(f"eval/{script}.py not present")
    helps = {
        s: subprocess.run(
            [sys.executable, f"eval/{s}.py", "--help"], cwd=REPO, capture_output=True, text=True
        ).stdout
        for s in ("policy_reuse", "sabotage")
    }
    for name in sorted(p.name for p in SWEEPS.glob("*.yaml")):
        for t in load_sweep(SWEEPS / name, out=tmp_path).tasks:
            for part in sweeplib.chain_parts(t.eval_command):
                script = Path(part[1]).stem
                for a in part[2:]:
                    if a.startswith("--"):
                        assert a.split("=")[0] in helps[script], (name, a)


# ---- sbatch text for the GPU presets ------------------------------------------------------------
@pytest.mark.parametrize("name", GPU_SWEEPS)
def test_gpu_sweep_train_script(name, tmp_path):
    p = plan(name, tmp_path)
    d = opts(p.scripts["train"])
    assert "--gres=gpu:4" in d
    assert "--cpus-per-task=32" in d  # 8 CPUs per GPU
    assert "--mem=240G" in d  # 60 GB per GPU
    assert "--time=12:00:00" in d
    assert "--constraint=a6000|l40s" in d
    assert "--array=0-11%6" in d
    assert "--requeue" in d and "--signal=B:USR1@600" in d
    assert "--open-mode=append" in d
    assert f"--output={tmp_path / 'sweep' / 'logs' / 'train_%A_%a.out'}" in d
    assert f"--chdir={REPO}" in d
    assert "--nodes=1" in d and "--ntasks=1" in d
    assert not any(o.startswith("--partition") for o in d)  # null in the YAML: the cluster's default
    # the rest of the template is kept: it reads its line of the index by SLURM_ARRAY_TASK_ID
    assert 'slurm/task_runner.py train --index "$INDEX" --task "${SLURM_ARRAY_TASK_ID' in p.scripts["train"]
    assert f"export LEDGERWRIGHT_PYTHON={shlex.quote(sys.executable)}" in p.scripts["train"]


@pytest.mark.parametrize("name", GPU_SWEEPS)
def test_gpu_sweep_eval_script_and_commands(name, tmp_path):
    p = plan(name, tmp_path)
    d = opts(p.scripts["eval"])
    assert "--gres=gpu:1" in d and "--cpus-per-task=8" in d and "--mem=60G" in d
    assert "--time=02:00:00" in d and "--constraint=a6000|l40s" in d
    assert "--array=0-11" in d
    assert f"--output={tmp_path / 'sweep' / 'logs' / 'eval_%A_%a.out'}" in d
    train = p.train_command()
    assert train[:3] == ["sbatch", "--parsable", "--array=0-11%6"]
    assert train[3:] == [str(p.paths["train_script"]), str(p.paths["train_index"])]
    ev = p.eval_command("1234")
    assert "--array=0-11" in ev
    assert "--dependency=aftercorr:1234" in ev  # the YAML chooses per-task chaining
    assert "--kill-on-invalid-dep=yes" in ev
    assert ev[-2:] == [str(p.paths["eval_script"]), str(p.paths["eval_index"])]


@pytest.mark.parametrize(
    ("preset", "constraint"), [("a6000", "a6000"), ("l40s", "l40s"), ("a6000-l40s", "a6000|l40s")]
)
def test_presets(preset, constraint, tmp_path):
    p = plan(
        "gemma3-writer-scaling.yaml",
        tmp_path,
        sets=[
            ("resources.preset", preset),
            ("resources.time", "24:00:00"),
            ("resources.gpus", 8),
            ("resources.gres_type", "l40s"),
            ("resources.partition", "gpu"),
            ("dependency", "afterok"),
            ("resources.max_parallel", None),
        ],
    )
    d = opts(p.scripts["train"])
    assert f"--constraint={constraint}" in d
    assert "--gres=gpu:l40s:8" in d and "--cpus-per-task=64" in d and "--mem=480G" in d
    assert "--partition=gpu" in d and "--time=24:00:00" in d
    assert "--array=0-11" in d
    assert "--partition=gpu" in opts(p.scripts["eval"])  # eval inherits partition and constraint
    assert f"--constraint={constraint}" in opts(p.scripts["eval"])
    assert "--dependency=afterok:77" in p.eval_command("77")


def test_preset_defaults_directly():
    res = sweeplib.make_resources({"preset": "l40s"}, where="t")
    assert sweeplib.resource_directives(res) == [
        "--nodes=1",
        "--ntasks=1",
        "--gres=gpu:4",
        "--cpus-per-task=32",
        "--mem=240G",
        "--time=24:00:00",
        "--constraint=l40s",
    ]
    cpu = sweeplib.make_resources({"preset": "cpu", "partition": "debug"}, where="t")
    assert sweeplib.resource_directives(cpu) == [
        "--partition=debug",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=1",
        "--mem=3G",
        "--time=00:30:00",
    ]


def test_tiny_cpu_script_has_no_gres(tmp_path):
    p = plan("tiny-cpu.yaml", tmp_path)
    for kind in ("train", "eval"):
        d = opts(p.scripts[kind])
        assert not any(o.startswith(("--gres", "--constraint", "--gpus")) for o in d)
        assert "--partition=debug" in d and "--cpus-per-task=1" in d and "--mem=3G" in d
    assert "--array=0-3%2" in opts(p.scripts["train"])
    assert "--dependency=afterok:5" in p.eval_command("5")


def test_templates_alone_have_gpu_defaults():
    for name, gres in (
        ("train_array.sbatch", "--gres=gpu:4"),
        ("eval_array.sbatch", "--gres=gpu:1"),
        ("multinode.sbatch", "--gres=gpu:8"),
    ):
        d = opts((REPO / "slurm" / name).read_text())
        assert gres in d and "--constraint=a6000|l40s" in d and "--requeue" in d
        assert any(o.startswith("--signal=B:USR1@") for o in d)
        assert any("%A_%a" in o or "%j" in o for o in d if o.startswith("--output"))
    multi = opts((REPO / "slurm" / "multinode.sbatch").read_text())
    assert "--nodes=2" in multi and "--ntasks-per-node=1" in multi


def test_multinode_script_takes_ranks_from_slurm():
    text = (REPO / "slurm" / "multinode.sbatch").read_text()
    assert "srun" in text
    assert '--num_machines "$NNODES"' in text and 'NNODES="${SLURM_NNODES' in text
    assert "--machine_rank @NODEID@" in text and '"$SLURM_NODEID"' in text  # per node, inside srun
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in text
    assert '--main_process_ip "$MAIN_ADDR" --main_process_port "$MAIN_PORT"' in text
    assert "configs/accelerate/multinode_slurm.yaml" in text
    assert (REPO / "configs" / "accelerate" / "multinode_slurm.yaml").is_file()


def test_rendered_scripts_are_valid_bash(tmp_path):
    for name in ("gemma3-writer-scaling.yaml", "tiny-cpu.yaml"):
        p = plan(name, tmp_path)
        for kind, text in p.scripts.items():
            f = tmp_path / f"{kind}.sbatch"
            f.write_text(text)
            assert subprocess.run(["bash", "-n", str(f)]).returncode == 0, (name, kind)


def test_shell_scripts_parse():
    for name in ("dev_cluster.sh", "train_array.sbatch", "eval_array.sbatch", "multinode.sbatch"):
        assert subprocess.run(["bash", "-n", str(REPO / "slurm" / name)]).returncode == 0, name


# ---- index files --------------------------------------------------------------------------------
def test_index_lines_round_trip(tmp_path):
    p = plan("gemma3-writer-scaling.yaml", tmp_path)
    p.write(SWEEPS / "gemma3-writer-scaling.yaml")
    lines = p.paths["train_index"].read_text().splitlines()
    assert len(lines) == 12
    for i, t in enumerate(p.sweep.tasks):
        e = read_index(p.paths["train_index"], i)
        assert (e.task_id, e.name, e.output_dir, e.command) == (i, t.name, t.train_dir, t.train_command)
        ev = read_index(p.paths["eval_index"], i)
        assert ev.output_dir == t.eval_dir and ev.command[ev.command.index("--writer") + 1] == t.train_dir
    with pytest.raises(SweepError, match="no line for task 12"):
        read_index(p.paths["train_index"], 12)


# ---- the CLI ------------------------------------------------------------------------------------
def run_submit(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "slurm/submit.py", *args], cwd=REPO, capture_output=True, text=True
    )


def test_dry_run_prints_and_writes_nothing(tmp_path):
    out = tmp_path / "dry"
    res = run_submit(
        "configs/sweeps/gemma3-writer-scaling.yaml", "--dry-run", "--show-scripts", "--out", str(out)
    )
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert not out.exists()
    assert "sweep gemma3-writer-scaling: 12 tasks" in text
    assert (
        f"TRAIN_JOB_ID=$(sbatch --parsable --array=0-11%6 {out}/train_array.sbatch {out}/train_index.tsv)"
        in text
    )
    assert (
        f'sbatch --parsable --array=0-11 --dependency=aftercorr:"$TRAIN_JOB_ID" --kill-on-invalid-dep=yes '
        f"{out}/eval_array.sbatch {out}/eval_index.tsv"
    ) in text
    index = [ln for ln in text.splitlines() if ln.split("\t")[0].isdigit()]
    assert len(index) == 24  # 12 train lines + 12 eval lines
    assert index[0].startswith(f"0\twriter-e140-s0\t{out}/tasks/writer-e140-s0/ckpt\taccelerate launch ")
    assert "#SBATCH --gres=gpu:4" in text and "#SBATCH --array=0-11%6" in text
    assert "dry run: nothing written, nothing submitted" in text


def test_cli_overrides(tmp_path):
    res = run_submit(
        "configs/sweeps/tiny-cpu.yaml",
        "--dry-run",
        "--show-scripts",
        "--out",
        str(tmp_path / "x"),
        "--dependency",
        "aftercorr",
        "--max-parallel",
        "3",
        "--partition",
        "batch",
        "--set",
        "train.args.max_steps=5",
        "--set",
        "grid.seed=[0, 1, 2]",
    )
    assert res.returncode == 0, res.stderr
    assert "--array=0-5%3" in res.stdout and '--dependency=aftercorr:"$TRAIN_JOB_ID"' in res.stdout
    assert "#SBATCH --partition=batch" in res.stdout
    assert "--max-steps 5" in res.stdout and "writer-e32-s2" in res.stdout


@pytest.mark.parametrize(
    ("sets", "match"),
    [
        ([("resources.preset", "h100")], r"resources: preset: unknown preset 'h100'"),
        ([("resources.gpu", 2)], r"resources: gpu: unknown resource field"),
        ([("dependency", "afterany")], r"dependency: expected afterok or aftercorr"),
        ([("grid.role", ["critic"])], r"grid.role: expected writer or reader"),
        ([("train.args.output_dir", "x")], r"train.args.output_dir: set by the sweep"),
        ([("resources.time", "forever")], r"resources: time: expected"),
        ([("extra_key", 1)], r"unknown field\(s\) \['extra_key'\]"),
        ([("grid.role", ["reader"])], r"eval.writer: reader tasks need a writer checkpoint"),
    ],
)
def test_bad_sweeps_name_file_and_field(sets, match):
    with pytest.raises(SweepError, match=match) as exc:
        load_sweep(SWEEPS / "tiny-cpu.yaml", sets=sets)
    assert "tiny-cpu.yaml" in str(exc.value)


def test_reader_sweep_uses_sabotage(tmp_path):
    s = load_sweep(
        SWEEPS / "tiny-cpu.yaml",
        out=tmp_path,
        sets=[("grid.role", ["reader"]), ("eval.writer", "ckpt/w"), ("eval.script", None)],
    )
    cmd = s.tasks[0].eval_command
    assert cmd[:2] == ["python", "eval/sabotage.py"]
    assert (
        cmd[cmd.index("--writer") + 1] == "ckpt/w" and cmd[cmd.index("--reader") + 1] == s.tasks[0].train_dir
    )
    assert s.tasks[0].train_command[2] == "train/reader.py"


def test_writer_with_listed_reader_uses_it_as_executor(tmp_path):
    s = load_sweep(SWEEPS / "tiny-cpu.yaml", out=tmp_path, sets=[("eval.reader", "/ckpts/reader")])
    cmd = s.tasks[0].eval_command
    assert cmd[1] == "eval/policy_reuse.py" and cmd[cmd.index("--executor") + 1] == "/ckpts/reader"


def test_resubmitting_needs_force(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    (out / "submitted.json").write_text('{"train_job": "1", "eval_job": "2"}')
    res = run_submit("configs/sweeps/tiny-cpu.yaml", "--out", str(out))
    assert res.returncode == 2 and "was submitted before (jobs 1, 2)" in res.stderr


def test_no_slurm_module_shadows_the_standard_library():
    names = {p.stem for p in (REPO / "slurm").glob("*.py")}
    assert names and not names & set(sys.stdlib_module_names)
