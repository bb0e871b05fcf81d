"""CI: compile the whole extension (torch binding + every kernel) once, for sm_80 and sm_90a,
as `deconv-patch build` would, on a machine with no GPU, with ptxas's register report.

One ninja build (torch.utils.cpp_extension) compiles each kernel file once for both
architectures, two files at a time ($MAX_JOBS); it catches binding/kernel interface breaks that
compiling each .cu alone cannot, and its log carries every kernel's registers and spills, which
.ci/run prints and checks. Usage: python .ci/build_extension.py BUILD_DIR"""

import sys
from pathlib import Path

from torch.utils import cpp_extension

from deconv_patch import extension

# Machine code for Ampere and for Hopper's wgmma target, no PTX: the architectures the kernels
# are tuned for, without a third front-end pass that checks nothing more.
GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-DDECONV_PATCH_SM90A",
]


def main(build_dir: str) -> int:
    Path(build_dir).mkdir(parents=True, exist_ok=True)
    print("flags:", " ".join(GENCODE), flush=True)
    # is_python_module=False: build, then load as a plain library (nothing is called).
    cpp_extension.load(
        name=extension.EXTENSION_NAME,
        sources=[str(p) for p in extension.source_files()],
        extra_include_paths=[str(extension.cuda_source_dir())],
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", "-Xptxas", "-v", *GENCODE],
        build_directory=build_dir,
        is_python_module=False,
        verbose=True,
    )
    print("extension built:", sorted(p.name for p in Path(build_dir).glob("*.so")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
