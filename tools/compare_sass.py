"""Whether two cuda/ trees compile their kernels to the same machine code. Each .cu file outside
cuda/binding and the family tables (<family>_unit.cu) is compiled to a cubin for one
architecture, both trees in turn from the same scratch folder (nvcc derives internal symbol
names from the source's path). Needs nvcc, no GPU.

By file (default): the cubins of the files both trees hold, byte for byte (identical cubins
hold identical SASS; nvcc embeds no time stamp). By kernel (--by-kernel): every kernel's code
(its cubin's .text.<kernel> section), wherever its file is, so that moving kernels between
files (per-type or per-config instance files) can be checked. By file it prints each file's
verdict; by kernel, the kernels that differ or exist in one tree only, then how many are the
same. Exits 1 when anything differs or exists in one tree only.

    python tools/compare_sass.py BEFORE/cuda AFTER/cuda [--arch sm_90a] [--jobs 2]
                                 [--by-kernel] [PREFIX ...]

PREFIX: only the kernel files whose path (relative to cuda/) starts with one of them, in each
tree (a file, or a folder such as gemm_phase_tma/).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence

NVCC = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
# nvcc names an anonymous namespace after its file (<n>_GLOBAL__N__<hash>_<n>_<file>_cu_<hash>):
# dropped, so that a kernel keeps its name when it moves to another file.
_FILE_NAMESPACE = re.compile(r"\d+_GLOBAL__N__[0-9a-f]{8}_\d+_\w*?_[0-9a-f]{8}(?=\d)")


def kernel_files(root: Path) -> List[str]:
    """The kernel files of a cuda/ tree, relative to it."""
    return sorted(str(p.relative_to(root)) for p in root.glob("*/*.cu")
                  if p.parent.name != "binding" and not p.name.endswith("_unit.cu"))


def compile_cubin(root: Path, source: str, arch: str) -> bytes:
    """One file's cubin, compiled in `root` from its relative path."""
    flags = [f"-arch={arch}", "-cubin", "-O3", "-std=c++17", "-I."]
    if arch == "sm_90a":
        flags.append("-DDECONV_PATCH_SM90A")
    out = root.parent / "cubins" / (source.replace("/", "_") + ".cubin")
    out.parent.mkdir(exist_ok=True)
    subprocess.run([NVCC, *flags, source, "-o", str(out)], check=True, cwd=root,
                   capture_output=True, text=True)
    return out.read_bytes()


def kernel_code(cubin: bytes) -> Dict[str, bytes]:
    """Kernel (mangled name, anonymous namespaces unnamed) -> its code: the .text.<name>
    sections of an ELF64 cubin, the same from any source path (the rest of a cubin is not)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def section(index: int):
        base = shoff + index * shentsize
        name, = struct.unpack_from("<I", cubin, base)
        offset, size = struct.unpack_from("<QQ", cubin, base + 0x18)
        return name, offset, size

    _, str_offset, str_size = section(shstrndx)
    names = cubin[str_offset:str_offset + str_size]
    code = {}
    for index in range(shnum):
        name_at, offset, size = section(index)
        name = names[name_at:names.index(b"\0", name_at)].decode()
        if name.startswith(".text."):
            code[_FILE_NAMESPACE.sub("_GLOBAL__N_", name[len(".text."):])] = \
                cubin[offset:offset + size]
    return code


def compile_tree(tree: Path, files: Sequence[str], arch: str, jobs: int, scratch: Path
                 ) -> List[bytes]:
    """Each file's cubin, the tree compiled from scratch/cuda (the same path for both trees
    of a comparison)."""
    root = scratch / "cuda"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(tree, root)
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda f: compile_cubin(root, f, arch), files))


def compare_files(files: Sequence[str], before: List[bytes], after: List[bytes]) -> List[str]:
    return [f"{'same     ' if a == b else 'DIFFERENT'} {f}" for f, a, b in zip(files, before, after)]


def compare_kernels(before: List[bytes], after: List[bytes]) -> List[str]:
    old = {k: v for cubin in before for k, v in kernel_code(cubin).items()}
    new = {k: v for cubin in after for k, v in kernel_code(cubin).items()}
    lines = [f"DIFFERENT {k}" for k in sorted(set(old) & set(new)) if old[k] != new[k]]
    lines += [f"ONLY IN {'BEFORE' if k in old else 'AFTER'} {k}"
              for k in sorted(set(old) ^ set(new))]
    same = sum(1 for k in set(old) & set(new) if old[k] == new[k])
    return lines + [f"same      {same} kernels"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("prefixes", nargs="*")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--by-kernel", action="store_true")
    args = parser.parse_intermixed_args(argv)
    ours, theirs = (
        [f for f in kernel_files(tree) if not args.prefixes or f.startswith(tuple(args.prefixes))]
        for tree in (args.before, args.after))
    if args.by_kernel:
        before_files, after_files = ours, theirs
    else:
        before_files = after_files = sorted(set(ours) & set(theirs))
    with tempfile.TemporaryDirectory() as scratch:
        before = compile_tree(args.before, before_files, args.arch, args.jobs, Path(scratch))
        after = compile_tree(args.after, after_files, args.arch, args.jobs, Path(scratch))
    if args.by_kernel:
        lines = compare_kernels(before, after)
    else:
        lines = compare_files(before_files, before, after)
        lines += [f"ONLY IN {'BEFORE' if f in ours else 'AFTER'} {f}"
                  for f in sorted(set(ours) ^ set(theirs))]
    for line in lines:
        print(line, flush=True)
    return 1 if any(line.startswith(("DIFFERENT", "ONLY IN")) for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
