"""CI: compile the extension's core and every kernel family's build unit, for sm_80 and sm_90a,
as `deconv-patch build` would, on a machine with no GPU, with ptxas's register report; then
load them and register each unit with the core, as a first use does.

Each kernel file is compiled once for both architectures. Two units build at a time, each a
ninja build of $MAX_JOBS files (a unit of one large file alone would leave a core idle); this
catches binding/kernel interface breaks that compiling each .cu alone cannot; the log
carries every kernel's registers and spills, which .ci/run prints and checks. Registering checks
each family's table (its ABI, size and name) against the binding, and the config names the
binding reads through the tables against the Python registry.

Usage: python .ci/build_extension.py BUILD_DIR [UNIT ...]   (default: every unit)"""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deconv_patch.kernels import extension
from deconv_patch.kernels.binding_configs import config_list_mismatches

# Machine code for Ampere and for Hopper's wgmma target, no PTX: the architectures the kernels
# are tuned for, without a third front-end pass that checks nothing more.
GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-DDECONV_PATCH_SM90A",
]


def _compile(unit: str, root: Path, flags: list) -> subprocess.CompletedProcess:
    """One unit's build in a process of its own, verbose."""
    return subprocess.run(
        extension.unit_build_command(unit, root, flags), capture_output=True, text=True, env={**os.environ, "DECONV_PATCH_VERBOSE_BUILD": "1"})


def main(build_dir: str, units: list) -> int:
    root = Path(build_dir)
    units = units or extension.unit_names()
    flags = ["-Xptxas", "-v", *GENCODE]
    print("flags:", " ".join(GENCODE), flush=True)
    # The units with most files first, so the last to finish is a small one.
    order = sorted([extension.CORE, *units], key=lambda u: -len(extension.unit_sources(u)))
    with ThreadPoolExecutor(max_workers=2) as pool:
        for unit, done in zip(order, pool.map(lambda u: _compile(u, root, flags), order)):
            print(f"== unit {unit}", flush=True)
            print(done.stdout, done.stderr, sep="\n", flush=True)
            if done.returncode != 0:
                print(f"building {unit} failed (exit {done.returncode})", flush=True)
                return 1
    # Load what was built (ninja finds nothing to do) and register each family with the core:
    # the core's own, then each unit's.
    core = extension.build_unit(extension.CORE, root, flags)
    extension.register_core_families(core)
    core_families = extension.registered_units(core)
    for unit in units:
        library = extension.build_unit(unit, root, flags)
        extension.register_unit(core, unit, str(library))
    registered = extension.registered_units(core)
    assert registered == core_families | set(units), (registered, units)
    if sorted(units) == extension.unit_names():
        problems = config_list_mismatches(core)
        assert not problems, "\n".join(problems)
    print("extension built:", extension.CORE, *units, "- units registered:", *sorted(registered))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
