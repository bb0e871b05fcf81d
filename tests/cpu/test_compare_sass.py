"""tools/compare_sass.py, the check that a change leaves the kernels' machine code as it was:
identical trees compare the same, a kernel file that compiles to other code is named while an
untouched one is not, and by kernel a file's kernels moved to another file compare the same
while a changed kernel is named. Needs nvcc (no GPU)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import compare_sass  # noqa: E402

pytestmark = pytest.mark.extended

FILES = ["relayout/relayout_channels_last.cu", "direct/direct.cu"]


@pytest.mark.skipif(not os.path.isfile(compare_sass.NVCC), reason="needs nvcc")
def test_a_changed_kernel_is_named_and_an_unchanged_one_is_not(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    shutil.copytree(ROOT / "cuda", before)
    shutil.copytree(ROOT / "cuda", after)
    assert compare_sass.main([str(before), str(after), *FILES]) == 0
    assert capsys.readouterr().out.count("same") == len(FILES)
    changed = after / FILES[0]
    changed.write_text(changed.read_text() +
                       "\n__global__ void compare_sass_probe(float* x) { x[0] = 1.0f; }\n")
    assert compare_sass.main([str(before), str(after), *FILES]) == 1
    out = capsys.readouterr().out
    assert f"DIFFERENT {FILES[0]}" in out and f"same      {FILES[1]}" in out



@pytest.mark.skipif(not os.path.isfile(compare_sass.NVCC), reason="needs nvcc")
def test_by_kernel_follows_kernels_across_files(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    shutil.copytree(ROOT / "cuda", before)
    shutil.copytree(ROOT / "cuda", after)
    moved = after / "relayout" / "relayout_moved.cu"
    (after / FILES[0]).rename(moved)  # the same kernels, from a file of another name
    by_kernel = [str(before), str(after), "--by-kernel", "relayout/"]
    assert compare_sass.main(by_kernel) == 0
    out = capsys.readouterr().out
    assert "DIFFERENT" not in out and "ONLY IN" not in out
    assert int(out.split("same")[1].split()[0]) >= 2  # (the re-layout kernel's instances)
    # the file-by-file mode sees one file gone and one new
    assert compare_sass.main([str(before), str(after), "relayout/"]) == 1
    out = capsys.readouterr().out
    assert f"ONLY IN BEFORE {FILES[0]}" in out and "ONLY IN AFTER relayout/relayout_moved.cu" in out
    text = moved.read_text()
    moved.write_text(text + "\n__global__ void compare_sass_probe(float* x) { x[0] = 1.0f; }\n")
    assert compare_sass.main(by_kernel) == 1
    assert "ONLY IN AFTER _Z18compare_sass_probePf" in capsys.readouterr().out
    # a kernel whose code changes: its input offset gains a channel
    changed = text.replace("s + ch * hw + px", "s + (ch + 1) * hw + px", 1)
    assert changed != text
    moved.write_text(changed)
    assert compare_sass.main(by_kernel) == 1
    assert "DIFFERENT _ZN12deconv_patch" in capsys.readouterr().out
