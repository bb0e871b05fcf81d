"""`deconv-patch` at its edges: files that are no checkpoint, full disks, unwritable or missing
output folders, file modes, empty input shapes, the missing command, CPU wording, the demo.

Most runs call `deconv_patch.cli.main` in-process (fast, and a write can be made to fail);
the rest run the console script as users do.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import pickle
import random
import shlex
import shutil
import stat
import subprocess
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
import torch
from torch import nn

from deconv_patch.atomic_files import write_files
from deconv_patch.checkpoint import STATE_DICT, load, load_checkpoint
from deconv_patch.cli import main
from deconv_patch.exit_codes import ExitCode
from tests.helpers import ROOT, run_cli as run

TINY = ["--model", "tests.cpu.test_cli_edge_cases:tiny"]
TINY_SHAPE = "2,4,3,3"
LINUX_FDS = Path("/proc/self/fd").is_dir()


def tiny() -> nn.Module:
    """One ConvTranspose2d: patching and validating it takes a fraction of a second."""
    return nn.Sequential(nn.ConvTranspose2d(4, 3, 2, 2), nn.ReLU())


def wide() -> nn.Module:
    """256 KB of weights: more than a 100 KB disk holds."""
    return nn.Sequential(nn.ConvTranspose2d(64, 64, 4, 2, 1))


def cli(capsys: pytest.CaptureFixture, *argv: str) -> Tuple[int, str, str]:
    """main(argv) in-process: (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """A fresh state_dict for tiny(), random weights."""
    model = tiny()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    path = tmp_path / "in.pt"
    torch.save(model.state_dict(), path)
    return path


def same_as_original(ckpt: Path, patched_path: Path) -> bool:
    original = tiny().eval()
    original.load_state_dict(torch.load(ckpt, weights_only=True))
    patched = load(patched_path)
    x = torch.randn(3, 4, 5, 5)
    with torch.no_grad():
        return torch.allclose(patched(x), original(x), atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------------- not a checkpoint


def _random_text() -> str:
    words = ["".join(random.choices("abcdefghijklmnopqrstuvwxyz", k=random.randint(2, 9)))
             for _ in range(40)]
    return " ".join(words) + "\n"


def _zip_with_damaged_pickle(path: Path) -> None:
    """A real torch.save zip whose data.pkl is replaced by random bytes."""
    good = path.with_suffix(".good")
    torch.save({"w": torch.randn(3)}, good)
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/data.pkl"):
                data = b"\x80\x02" + os.urandom(len(data))
            dst.writestr(info, data)
    good.unlink()


NOT_CHECKPOINTS = {
    "random_bytes": lambda p: p.write_bytes(os.urandom(random.randint(200, 4000))),
    "json_text": lambda p: p.write_text(json.dumps({"lr": random.random(), "epochs": [1, 2]})),
    "plain_pickle": lambda p: p.write_bytes(pickle.dumps([random.randint(0, 9) for _ in "abc"])),
    "plain_text": lambda p: p.write_text(_random_text()),
    "zip_damaged_pickle": _zip_with_damaged_pickle,
}


@pytest.mark.parametrize("kind", sorted(NOT_CHECKPOINTS))
@pytest.mark.parametrize("trust", [False, True])
def test_a_file_that_is_no_checkpoint_is_corrupt_whatever_the_trust_flag(
        tmp_path, capsys, kind, trust):
    path = tmp_path / "bad.pt"
    NOT_CHECKPOINTS[kind](path)
    out = tmp_path / "out.pt"
    argv = ["patch", str(path), "-o", str(out), "--input-shape", TINY_SHAPE, *TINY]
    code, _, err = cli(capsys, *argv, *(["--trust-checkpoint"] if trust else []))
    assert code == ExitCode.CORRUPT_FILE, err
    line = one_error_line(err)
    assert "--trust-checkpoint" not in line and "pickled model" not in line
    assert not out.exists()


@pytest.mark.parametrize("kind", ["plain_text", "random_bytes", "json_text", "plain_pickle"])
def test_a_non_checkpoint_file_is_named_for_what_it_is_not(tmp_path, capsys, kind):
    path = tmp_path / "notes.pt"
    NOT_CHECKPOINTS[kind](path)
    code, _, err = cli(capsys, "info", str(path))
    line = one_error_line(err)
    assert code == ExitCode.CORRUPT_FILE
    assert "not a PyTorch checkpoint (neither a zip archive nor a legacy pickle)" in line
    assert "KeyError" not in line and "load key" not in line


def test_only_pickled_python_objects_ask_for_trust(tmp_path, capsys):
    """A whole nn.Module (zip or legacy format) asks for --trust-checkpoint and loads with it;
    a training checkpoint whose dict holds other Python objects asks too, naming them."""
    model = tiny()
    torch.save(model, tmp_path / "whole.pt")
    torch.save(model, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    for name in ("whole.pt", "legacy.pt"):
        code, _, err = cli(capsys, "info", str(tmp_path / name))
        assert code == ExitCode.UNTRUSTED_PICKLE and "holds a whole pickled model" in err
        code, out, err = cli(capsys, "info", str(tmp_path / name), "--trust-checkpoint")
        assert code == ExitCode.OK and "1 ConvTranspose2d layer(s)" in out, err
    lr = random.random()
    torch.save({"state_dict": model.state_dict(), "args": argparse.Namespace(lr=lr)},
               tmp_path / "train.pt")
    code, _, err = cli(capsys, "info", str(tmp_path / "train.pt"), *TINY)
    line = one_error_line(err)
    assert code == ExitCode.UNTRUSTED_PICKLE and "argparse.Namespace" in line
    assert "whole pickled model" not in line and "--trust-checkpoint" in line
    loaded = load_checkpoint(tmp_path / "train.pt", trust=True)
    assert loaded.kind == STATE_DICT and loaded.state_dict.keys() == model.state_dict().keys()


def test_a_truncated_zip_checkpoint_is_called_one(tmp_path, capsys, ckpt):
    blob = ckpt.read_bytes()
    (tmp_path / "cut.pt").write_bytes(blob[: random.randint(100, len(blob) - 100)])
    code, _, err = cli(capsys, "info", str(tmp_path / "cut.pt"), "--trust-checkpoint")
    assert code == ExitCode.CORRUPT_FILE and "truncated or corrupt zip" in one_error_line(err)


# --------------------------------------------------------------------- full disk


class FullDisk:
    """os.write for the files under `folder` whose name starts with `victim`, as on a disk with
    `room` bytes left: what fits lands on disk (a short write), then ENOSPC, as the kernel does."""

    def __init__(self, folder: Path, victim: str, room: int) -> None:
        self.folder, self.victim, self.room, self.real = str(folder), victim, room, os.write
        self.used = 0

    def __call__(self, fd: int, data) -> int:
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return self.real(fd, data)
        if not name.startswith(self.folder) or not Path(name).name.startswith(self.victim):
            return self.real(fd, data)
        if self.used >= self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = self.real(fd, bytes(data)[: self.room - self.used])
        self.used += written
        return written


@pytest.mark.skipif(not LINUX_FDS, reason="needs /proc/self/fd to tell files apart")
@pytest.mark.parametrize("room", [0, 100_000])
def test_full_disk_is_reported_through_torchs_runtime_error(tmp_path, monkeypatch, room):
    """torch's zip writer passes an early ENOSPC on, and turns a later one into "[enforce fail
    at inline_container.cc]"; either way write_files raises ENOSPC naming the file and leaves
    no file at all (the complete first one included)."""
    monkeypatch.setattr(os, "write", FullDisk(tmp_path, ".b.pt.", room))
    data = {"w": torch.randn(50_000)}
    with pytest.raises(OSError) as err:
        write_files({tmp_path / "a.pt": lambda f: torch.save(data, f),
                     tmp_path / "b.pt": lambda f: torch.save(data, f)})
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(tmp_path / "b.pt")
    if room:
        assert "inline_container" in str(err.value.__cause__)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not LINUX_FDS, reason="needs /proc/self/fd to tell files apart")
@pytest.mark.parametrize("room", [0, 500])
@pytest.mark.parametrize("victim", [".out.pt.", ".out.state_dict.pt.", ".r.json."])
def test_disk_full_while_writing_leaves_nothing_and_a_rerun_works(
        tmp_path, capsys, monkeypatch, ckpt, victim, room):
    out, report = tmp_path / "out.pt", tmp_path / "r.json"
    argv = ["patch", str(ckpt), "-o", str(out), "--input-shape", TINY_SHAPE, *TINY,
            "--report", str(report)]
    with monkeypatch.context() as patched:
        patched.setattr(os, "write", FullDisk(tmp_path, victim, room))
        code, _, err = cli(capsys, *argv)
    assert code == ExitCode.WRITE_FAILED, err
    line = one_error_line(err)
    assert "the disk is full" in line and "inline_container" not in line
    assert f"cannot write {tmp_path / victim.strip('.')}:" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.pt"]  # no output, no temp file
    code, _, err = cli(capsys, *argv)
    assert code == ExitCode.OK, err
    assert same_as_original(ckpt, out) and json.loads(report.read_text())["passed"] is True
    assert (tmp_path / "out.state_dict.pt").is_file()


@contextmanager
def mounted_tmpfs(folder: Path, options: str) -> Iterator[None]:
    folder.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                         capture_output=True)
    if res.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("mount"),
                    reason="mounting a small tmpfs needs root")
def test_real_full_disk_leaves_nothing(tmp_path, capsys):
    torch.save(wide().state_dict(), tmp_path / "sd.pt")
    disk = tmp_path / "disk"
    with mounted_tmpfs(disk, "size=100k"):
        code, _, err = cli(capsys, "patch", str(tmp_path / "sd.pt"), "-o", str(disk / "o.pt"),
                           "--input-shape", "1,64,3,3", "--model",
                           "tests.cpu.test_cli_edge_cases:wide")
        assert code == ExitCode.WRITE_FAILED and "the disk is full" in one_error_line(err)
        assert list(disk.iterdir()) == []


# --------------------------------------------------------------------- output folders


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody may write in: chmod for a user, a read-only mount for root."""
    folder = tmp_path / "ro"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        with mounted_tmpfs(folder, "ro,size=64k"):
            yield folder
        return
    folder.mkdir()
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("command", ["patch", "validate"])
@pytest.mark.parametrize("where", ["read_only", "missing"])
def test_report_in_an_unwritable_folder_fails_before_any_work(
        tmp_path, capsys, ckpt, read_only_dir, command, where):
    folder = read_only_dir if where == "read_only" else tmp_path / "no" / "such"
    report = folder / "r.md"
    out = tmp_path / "out.pt"
    first = [str(ckpt), "-o", str(out)] if command == "patch" else [str(ckpt), str(ckpt)]
    code, stdout, err = cli(capsys, command, *first, "--input-shape", TINY_SHAPE, *TINY,
                            "--report", str(report))
    assert code == ExitCode.WRITE_FAILED, err
    assert str(folder) in one_error_line(err)
    assert stdout == ""  # nothing loaded, patched or validated
    assert not out.exists() and not report.exists()
    # checked before the input is even read: a missing input still says the output problem
    code, _, err = cli(capsys, command, str(tmp_path / "missing.pt"), *first[1:],
                       "--input-shape", TINY_SHAPE, *TINY, "--report", str(report))
    assert code == ExitCode.WRITE_FAILED, err


def test_out_in_a_read_only_folder_fails_before_any_work(capsys, ckpt, read_only_dir):
    code, stdout, err = cli(capsys, "patch", str(ckpt), "-o", str(read_only_dir / "o.pt"),
                            "--input-shape", TINY_SHAPE, *TINY)
    assert code == ExitCode.WRITE_FAILED and "not writable" in one_error_line(err)
    assert stdout == ""


# --------------------------------------------------------------------- file modes


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_written_files_get_the_mode_of_a_plain_write(tmp_path, capsys, ckpt, mask):
    out, report = tmp_path / "out.pt", tmp_path / "r.html"
    with umask(mask):
        code, _, err = cli(capsys, "patch", str(ckpt), "-o", str(out), "--input-shape",
                           TINY_SHAPE, *TINY, "--report", str(report))
    assert code == ExitCode.OK, err
    for path in (out, tmp_path / "out.state_dict.pt", report):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path
    # like open(path, "w"), replacing a file (--force) keeps that file's mode
    out.chmod(0o600)
    with umask(mask):
        code, _, err = cli(capsys, "patch", str(ckpt), "-o", str(out), "--input-shape",
                           TINY_SHAPE, *TINY, "--force")
    assert code == ExitCode.OK, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and same_as_original(ckpt, out)


# --------------------------------------------------------------------- arguments


@pytest.mark.parametrize("shape", ["0,16,1,1", "2,4,0,3", "2,4,3,0"])
def test_an_input_shape_with_a_zero_dimension_is_refused_before_loading(
        tmp_path, capsys, ckpt, shape):
    out = tmp_path / "out.pt"
    for source in (ckpt, tmp_path / "missing.pt"):  # the missing file is never looked at
        code, stdout, err = cli(capsys, "patch", str(source), "-o", str(out), "--input-shape",
                                shape, *TINY)
        assert code == ExitCode.USAGE, err
        assert f"bad shape '{shape}'" in err and "zero dimension" in err and stdout == ""
        assert not out.exists()


def test_no_command_is_a_usage_error():
    res = run()
    assert res.returncode == ExitCode.USAGE
    assert res.stdout == "" and "usage: deconv-patch" in res.stderr
    assert "a command is required" in res.stderr


# --------------------------------------------------------------------- CPU wording, README


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the wording without CUDA")
@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (4, 2, 1)])
def test_patch_of_a_pt2_on_cpu_says_nothing_is_faster(tmp_path, capsys, kernel, stride,
                                                      padding):
    """k2 s2 becomes deconv_patch's op, k4 s2 p1 stays on cuDNN ("nothing to patch"): either
    way the CPU run says nothing gets faster here, and never that cuDNN is as fast here."""
    model = nn.Sequential(nn.ConvTranspose2d(4, 3, kernel, stride, padding)).eval()
    x = torch.randn(2, 4, 3, 3)
    torch.export.save(torch.export.export(model, (x,)), str(tmp_path / "m.pt2"))
    code, out, err = cli(capsys, "patch", str(tmp_path / "m.pt2"), "-o",
                         str(tmp_path / "o.pt2"), "--input-shape", "2,4,3,3")
    assert code == ExitCode.OK, err
    assert "nothing is faster" in out and "PyTorch's own kernels" in out
    assert "(cuDNN runs them as fast" not in out
    assert (tmp_path / "o.pt2").exists() == ("nothing to patch" not in out)


def _readme_commands() -> List[List[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Command line"):]
    start = section.index("```bash") + len("```bash")
    block = section[start:section.index("```", start)]
    return [shlex.split(cmd) for cmd in block.replace("\\\n", " ").splitlines()
            if cmd.strip()]


def test_readme_validate_example_runs_on_a_state_dict_original(tmp_path, capsys, ckpt):
    """The README's `validate` line, with its file names, model and shape swapped for a small
    case, runs: a state_dict ORIGINAL needs the --model the line carries."""
    validate = next(c for c in _readme_commands() if c[:2] == ["deconv-patch", "validate"])
    patch = next(c for c in _readme_commands() if c[:2] == ["deconv-patch", "patch"])
    original, fast = validate[2], validate[3]
    assert original == patch[2] and fast == patch[patch.index("-o") + 1]
    code, _, err = cli(capsys, "patch", str(ckpt), "-o", str(tmp_path / "fast.pt"),
                       "--input-shape", TINY_SHAPE, *TINY)
    assert code == ExitCode.OK, err
    swap = {original: str(ckpt), fast: str(tmp_path / "fast.pt"),
            "examples.unet:build_model": TINY[1], "1,1,572,572": TINY_SHAPE}
    code, out, err = cli(capsys, *[swap.get(a, a) for a in validate[1:]])
    assert code == ExitCode.OK and "PASS" in out, err
