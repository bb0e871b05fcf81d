"""CI: compile the whole extension (torch binding + every kernel) with the flags an H100 gets,
as `deconv-patch build` would, on a machine with no GPU. Catches binding/kernel interface breaks
that compiling each .cu alone cannot. Usage: python .ci/build_extension.py BUILD_DIR"""

import sys
from pathlib import Path

from torch.utils import cpp_extension

from deconv_patch import extension


def main(build_dir: str) -> int:
    Path(build_dir).mkdir(parents=True, exist_ok=True)
    flags = extension.gencode_flags([(9, 0)])
    print("flags:", " ".join(flags), flush=True)
    # is_python_module=False: build, then load as a plain library (nothing is called).
    cpp_extension.load(
        name=extension.EXTENSION_NAME,
        sources=[str(p) for p in extension.source_files()],
        extra_include_paths=[str(extension.cuda_source_dir())],
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", *flags],
        build_directory=build_dir,
        is_python_module=False,
        verbose=False,
    )
    print("extension built:", sorted(p.name for p in Path(build_dir).glob("*.so")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
