"""The ``extql`` command under a user's mistakes, in child processes.

Every case is held to the command line's contract: exit status 0 (done), 1
(the model has a problem) or 2 (the command could not do its work), a short
message that names the path or input, no traceback, no signal, no hang.
Each group of cases runs whole in one driver process (tests/cli_battery.py:
``extql.cli.main`` per command line, with the process's stdout and stderr
file descriptors captured, so a crash or a hang is pinned on its command
line), and its first case again as a separate ``python -m extql`` process,
exactly as a user runs it.  The byte-mutated models go through ``check``
(and a share of them through ``run``, ``attach``, ``inline`` and
``lower``) the same way, in batches of 100.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_battery import quark_model

# Once, on the kernel variant the CPU picks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

# tests/: the child process's driver script and the helpers it imports.
TESTS = Path(__file__).resolve().parents[1]
TIMEOUT = 120
MAX_LINES = 8  # a failure's stdout + stderr: a few lines at most


def extql(*args, cwd: Path, env: dict | None = None,
          timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """``python -m extql ARGS`` in ``cwd``, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "extql", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else dict(os.environ))


def assert_clean(proc, statuses, *mentions: str) -> str:
    """The process ended by itself with one of ``statuses``, without a
    traceback, and (when it failed) with a short message holding ``mentions``.
    Returns stdout + stderr."""
    text = proc.stdout + proc.stderr
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {text}"
    assert proc.returncode in statuses, f"exit {proc.returncode}: {text}"
    assert "Traceback" not in text, text
    assert "internal error" not in text, text
    if proc.returncode != 0:
        assert len(text.splitlines()) <= MAX_LINES, text
    for m in mentions:
        assert m in text, f"{m!r} not in: {text}"
    return text


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A directory with a good Quark-form model and the usual bad files."""
    d = tmp_path_factory.mktemp("battery")
    data = quark_model().SerializeToString()
    (d / "good.onnx").write_bytes(data)
    (d / "empty.onnx").write_bytes(b"")
    (d / "text.onnx").write_text("this is a README, not a model\n" * 20)
    (d / "random.onnx").write_bytes(np.random.default_rng(1).bytes(4096))
    (d / "truncated.onnx").write_bytes(data[: len(data) // 2])
    (d / "adir.onnx").mkdir()
    (d / "afile").write_text("x")
    return d


def run_cases(cases: list[tuple], cwd: Path, results: Path) -> None:
    """Run ``cases`` -- (argv, statuses, mentions...) -- in one driver process
    and hold each to the contract; the first one also as a real process."""
    argvs = [[str(a) for a in c[0]] for c in cases]
    for (argv, statuses, *mentions), result in zip(
            cases, _run_driver(argvs, cwd, results), strict=True):
        text = result["out"] + result["err"]
        assert result["escaped"] is None, f"{argv}: {result['escaped']}"
        assert result["rc"] in statuses, f"{argv}: exit {result['rc']}: {text}"
        assert "Traceback" not in text and "internal error" not in text, f"{argv}: {text}"
        if result["rc"] != 0:
            assert len(text.splitlines()) <= MAX_LINES, f"{argv}: {text}"
        for m in mentions:
            assert m in text, f"{argv}: {m!r} not in: {text}"
    argv, statuses, *mentions = cases[0]
    assert_clean(extql(*argv, cwd=cwd), statuses, *mentions)


BAD_MODELS = [
    ("nope.onnx", "no such file"),
    ("missing_dir/m.onnx", "does not exist"),
    ("adir.onnx", "is a directory"),
    ("empty.onnx", "not an ONNX model"),
    ("text.onnx", "not a readable ONNX model"),
    ("random.onnx", "ONNX model"),
    ("truncated.onnx", "not a readable ONNX model"),
]
TRANSFORMS = ("attach", "inline", "lower")


@pytest.mark.parametrize("command", ["check", "run", *TRANSFORMS])
def test_bad_model_paths_and_files(work, command):
    extra = ["out.onnx"] if command in TRANSFORMS else []
    cases = [([command, name, *extra], {2}, says, name) for name, says in BAD_MODELS]
    run_cases(cases, work, work / f"bad-{command}.jsonl")
    assert not (work / "out.onnx").exists()


UNWRITABLE = [
    ("missing_dir/out.onnx", "does not exist"),
    ("adir.onnx", "is a directory"),
    ("afile/out.onnx", "is not a directory"),
    # A file system that takes no new file even for root (chmod would not stop root).
    ("/proc/extql-out.onnx", "cannot write"),
]


def test_unwritable_outputs_fail_before_the_work(work):
    cases = [([command, "good.onnx", out, "-q"], {2}, says, out)
             for command in TRANSFORMS for out, says in UNWRITABLE]
    cases += [(["run", "good.onnx", "--save-outputs", out], {2}, says, out)
              for out, says in UNWRITABLE]
    run_cases(cases, work, work / "unwritable.jsonl")
    # run checks --save-outputs before it loads or runs the model.
    proc = extql("run", "good.onnx", "--save-outputs", "missing_dir/o.npz", cwd=work)
    assert_clean(proc, {2}, "missing_dir")
    assert "loading" not in proc.stderr and "output out" not in proc.stdout


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="permissions do not stop root; /proc covers it above")
def test_read_only_directory(work, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        proc = extql("attach", work / "good.onnx", ro / "out.onnx", cwd=work)
    finally:
        ro.chmod(0o755)
    assert_clean(proc, {2}, "cannot write", str(ro))


def test_run_save_outputs_writes_exactly_the_name_given(work, tmp_path):
    proc = extql("run", work / "good.onnx", "--save-outputs", tmp_path / "result", "-q",
                 cwd=work)
    assert_clean(proc, {0})
    with np.load(tmp_path / "result") as data:
        assert data["out"].shape == (1, 3)


def _npz_cases(d: Path) -> list[tuple[str, str]]:
    np.savez(d / "valid.npz", x=np.ones((1, 4), np.float32))
    whole = (d / "valid.npz").read_bytes()
    (d / "truncated.npz").write_bytes(whole[: len(whole) // 2])
    (d / "garbage.npz").write_bytes(b"\x00\x01garbage" * 50)
    (d / "empty.npz").write_bytes(b"")
    np.save(d / "one.npy", np.ones((1, 4), np.float32))
    np.savez(d / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    np.savez(d / "other_names.npz", nope=np.ones(3, np.float32))
    np.savez(d / "wrong_dtype.npz", x=np.ones((1, 4), np.float64))
    return [
        ("garbage.npz", "not a valid .npz file"),
        ("missing.npz", "no such file"),
        ("adir.onnx", "is a directory"),
        ("truncated.npz", "not a valid .npz file"),
        ("empty.npz", "not a valid .npz file"),
        ("one.npy", "not a valid .npz file"),
        ("objects.npz", "not a valid .npz file"),
        ("other_names.npz", "not inputs of the model"),
        ("wrong_dtype.npz", "the array 'x' is float64, but the model's input 'x' is float32"),
    ]


def test_bad_npz_inputs(work):
    cases = [(["run", "good.onnx", "--inputs", name], {2}, says, name)
             for name, says in _npz_cases(work)]
    run_cases(cases, work, work / "npz.jsonl")
    for name in ("garbage.npz", "truncated.npz"):
        assert "pickled data" not in extql("run", "good.onnx", "--inputs", name,
                                           cwd=work).stderr


def test_missing_or_short_external_data(tmp_path):
    model = quark_model()
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=0)
    data = (tmp_path / "ext.onnx.data").read_bytes()
    short = tmp_path / "short"
    short.mkdir()
    (short / "ext.onnx").write_bytes(path.read_bytes())
    (short / "ext.onnx.data").write_bytes(data[: len(data) // 2])
    os.remove(tmp_path / "ext.onnx.data")
    cases = [([command, path, *extra], {2}, "external data", "next to the model")
             for command, *extra in (["check"], ["run"], ["attach", "o1.onnx"],
                                     ["inline", "o2.onnx"], ["lower", "o3.onnx"])]
    cases += [([command, short / "ext.onnx", *extra], {2}, "ext.onnx")
              for command, *extra in (["check"], ["run"], ["attach", "o4.onnx"])]
    run_cases(cases, tmp_path, tmp_path / "external.jsonl")


def _dangling(model: onnx.ModelProto, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def test_dangling_zero_point_fails_check(tmp_path):
    """A zero point whose initializer is gone: onnxruntime refuses the model,
    so check must not pass it (nor run / inline work on it)."""
    model = quark_model()
    keep = [t for t in model.graph.initializer if t.name != "u_zp"]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    path = _dangling(model, tmp_path, "dangling.onnx")
    run_cases([
        (["check", path], {1}, "'u_zp' is produced by nothing", "y_q_u32", "y_dq_u32"),
        (["run", path], {1}, "'u_zp' is produced by nothing"),
        (["inline", path, "o.onnx"], {1}, "'u_zp' is produced by nothing"),
    ], tmp_path, tmp_path / "dangling.jsonl")


def _if_model(branch_input: str) -> onnx.ModelProto:
    """An If whose then-branch dequantizes with an outer-scope zero point."""
    from onnx import TensorProto, helper

    branch = helper.make_graph(
        [helper.make_node("ExtendedDequantizeLinear", ["q", "s", branch_input], ["y"],
                          domain="com.amd.quark", name="inner_dq")],
        "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    other = helper.make_graph(
        [helper.make_node("Identity", ["zero"], ["y2"])], "else", [],
        [helper.make_tensor_value_info("y2", TensorProto.FLOAT, [4])])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["out"], then_branch=branch, else_branch=other)],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("q", TensorProto.UINT32, [4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4])],
        [onnx.numpy_helper.from_array(np.float32(0.5), "s"),
         onnx.numpy_helper.from_array(np.uint32(3), "zp"),
         onnx.numpy_helper.from_array(np.zeros(4, np.float32), "zero")])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.amd.quark", 1)])


def test_subgraphs_see_outer_scopes(tmp_path):
    ok = _dangling(_if_model("zp"), tmp_path, "if_ok.onnx")
    bad = _dangling(_if_model("zp_gone"), tmp_path, "if_bad.onnx")
    run_cases([
        (["check", bad], {1}, "'zp_gone' is produced by nothing", "inner_dq",
         "subgraph 'then_branch'"),
        (["check", ok], {0}, "OK"),
    ], tmp_path, tmp_path / "if.jsonl")


def test_invalid_element_type_is_a_problem_not_a_crash(tmp_path):
    cases = []
    for where, code in (("initializer", 99), ("input", 77), ("value_info", 45)):
        model = quark_model()
        if where == "initializer":
            next(t for t in model.graph.initializer if t.name == "u_zp").data_type = code
        elif where == "input":
            model.graph.input[0].type.tensor_type.elem_type = code
        else:
            model.graph.value_info.append(
                onnx.helper.make_tensor_value_info("y", code, [1, 3]))
        path = tmp_path / f"badtype-{where}.onnx"
        path.write_bytes(model.SerializeToString())
        says = f"has an invalid element type {code}"
        cases += [(["check", path], {1}, says),
                  (["run", path], {1}, says),
                  (["attach", path, "o.onnx"], {1}, says),
                  (["lower", path, "o.onnx"], {1}, says)]
    run_cases(cases, tmp_path, tmp_path / "types.jsonl")


def test_bench_arguments_and_report_locations(tmp_path):
    (tmp_path / "adir").mkdir()
    cases = [(["bench", "--threads", value, "--quick"], {2}, "argument --threads", value)
             for value in ("-1", "x", "1.5", "", "2**40")]
    # Report files are checked before the (long) measurements start.
    cases += [(["bench", "--quick", "--json", "nodir/r.json"], {2}, "nodir/r.json",
               "does not exist"),
              (["bench", "--quick", "--markdown", "adir"], {2}, "adir: is a directory")]
    run_cases(cases, tmp_path, tmp_path / "bench.jsonl")


# --------------------------------------------------------------------------
# Byte-mutated models


N_MUTANTS = 600
BATCH = 100


def _run_driver(cases: list[list[str]], cwd: Path, results: Path) -> list[dict]:
    """Run the command lines in one driver process; one result per case.  A
    crash or a hang fails the test naming the command line that was running."""
    lines = "".join(json.dumps(c) + "\n" for c in cases)
    proc = subprocess.run([sys.executable, str(TESTS / "cli_battery.py"), str(results)],
                          input=lines, capture_output=True, text=True, cwd=cwd,
                          timeout=TIMEOUT * 3)
    rows = [json.loads(r) for r in results.read_text().splitlines()]
    begun = {r["begin"]: r["argv"] for r in rows if "begin" in r}
    ended = {r["end"]: r for r in rows if "end" in r}
    unfinished = [begun[i] for i in begun if i not in ended]
    assert proc.returncode == 0 and not unfinished, (
        f"driver exit {proc.returncode} while running {unfinished}: {proc.stderr[-2000:]}")
    assert len(ended) == len(cases)
    return [{**ended[i], "argv": begun[i]} for i in range(len(cases))]


def _accepts(path: Path) -> bool:
    """onnx's own verdict on a file: it parses and onnx.checker accepts it."""
    try:
        model = onnx.load(str(path), load_external_data=False)
        onnx.checker.check_model(model)
    except Exception:  # noqa: BLE001 - any refusal
        return False
    return model.HasField("graph")


def _assert_contract(result: dict, mutant: Path) -> None:
    argv = result["argv"]
    text = result["out"] + result["err"]
    assert result["escaped"] is None, f"{argv}: {result['escaped']}"
    assert result["rc"] in (0, 1, 2), f"{argv}: exit {result['rc']}: {text}"
    assert "Traceback" not in text and "internal error" not in text, f"{argv}: {text}"
    if result["rc"] != 0:
        assert len(text.splitlines()) <= MAX_LINES, f"{argv}: {text}"
        assert str(mutant.name) in text or argv[0] != "check", f"{argv}: {text}"
    elif argv[0] == "check":
        # check passes only what onnx itself accepts, with its summary line.
        assert _accepts(mutant), f"{argv}: passed a model onnx.checker rejects: {text}"
        assert "checked: OK" in text or "no ExtendedQuantizeLinear" in text, text


@pytest.fixture(scope="module")
def mutants(tmp_path_factory) -> tuple[Path, list[Path]]:
    from cli_battery import mutate

    d = tmp_path_factory.mktemp("mutants")
    data = quark_model().SerializeToString()
    paths = []
    for seed in range(N_MUTANTS):
        p = d / f"m{seed:04d}.onnx"
        p.write_bytes(mutate(data, seed))
        paths.append(p)
    return d, paths


def test_mutated_models_through_check(mutants):
    d, paths = mutants
    statuses = []
    for start in range(0, len(paths), BATCH):
        batch = paths[start:start + BATCH]
        results = _run_driver([["check", p.name] for p in batch], d,
                              d / f"check-{start}.jsonl")
        for result, path in zip(results, batch, strict=True):
            _assert_contract(result, path)
            statuses.append(result["rc"])
    # Most damage must be noticed: the mutations that leave a model onnx accepts
    # (a changed weight byte) are a minority.
    assert statuses.count(1) >= 50 and statuses.count(2) >= 300, (
        statuses.count(0), statuses.count(1), statuses.count(2))


def test_mutated_models_through_the_other_commands(mutants):
    d, paths = mutants
    cases, used = [], []
    for i, p in enumerate(paths[::6]):
        command = ("run", "attach", "inline", "lower")[i % 4]
        extra = [] if command == "run" else [f"out-{p.stem}.onnx"]
        cases.append([command, p.name, *extra])
        used.append(p)
    for result, path in zip(_run_driver(cases, d, d / "others.jsonl"), used, strict=True):
        _assert_contract(result, path)


def test_a_sample_of_mutants_as_separate_processes(mutants):
    d, paths = mutants
    for p in paths[3::100]:
        assert_clean(extql("check", p.name, cwd=d), {0, 1, 2})


def test_random_inputs_that_cannot_be_made(tmp_path):
    """A damaged or huge input shape, or a mistaken --dim, is refused before
    any memory is taken for it."""
    cases = []
    for name, edit in (("huge", lambda d: setattr(d, "dim_value", 1 << 40)),
                       ("negative", lambda d: setattr(d, "dim_value", -3)),
                       ("symbolic", lambda d: setattr(d, "dim_param", "batch"))):
        model = quark_model()
        edit(model.graph.input[0].type.tensor_type.shape.dim[0])
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
    cases = [
        (["run", tmp_path / "huge.onnx"], {2}, "too big for a random value", "'x'"),
        (["run", tmp_path / "negative.onnx"], {2}, "negative dimension -3", "'x'"),
        (["run", tmp_path / "symbolic.onnx", "--dim", "batch=99999999999"], {2},
         "too big for a random value"),
        (["run", tmp_path / "symbolic.onnx", "--dim", "batch"], {2}, "expected NAME=SIZE"),
        (["run", tmp_path / "symbolic.onnx", "--dim", "batch=3", "-q"], {0}, "float32[3, 3]"),
    ]
    run_cases(cases, tmp_path, tmp_path / "random.jsonl")
