"""CI: compile the extension's core and every kernel family's build unit, for sm_80 and sm_90a,
as `deconv-patch build` would, on a machine with no GPU, with ptxas's register report; then
load them and register each unit with the core, as a first use does.

Each kernel file is compiled once for both architectures, two files at a time ($MAX_JOBS),
which catches binding/kernel interface breaks that compiling each .cu alone cannot; the log
carries every kernel's registers and spills, which .ci/run prints and checks. Registering checks
each unit's table (its ABI, family code and size) against the binding, and the config names the
binding reads through the tables against the Python registry.

Usage: python .ci/build_extension.py BUILD_DIR [UNIT ...]   (default: every unit)"""

import sys
from pathlib import Path

from deconv_patch import extension, kernels

# Machine code for Ampere and for Hopper's wgmma target, no PTX: the architectures the kernels
# are tuned for, without a third front-end pass that checks nothing more.
GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-DDECONV_PATCH_SM90A",
]


def _config_names_match(core) -> None:
    """The binding's config lists, read through the units' tables, are the registry's."""
    for family, names in (("gemm_phase_tma", core.gemm_phase_tma_config_names()),
                          ("gemm_out_tile", core.gemm_out_tile_config_names()),
                          ("ffma_tile", core.ffma_tile_config_names())):
        expected = [c.variant.split(":", 1)[1] for c in kernels.BY_NAME[family].configs]
        assert names == expected, (family, names, expected)
    for family, count in (("gemm_phase", core.gemm_phase_num_configs()),
                          ("gemm_phase_sm90", core.gemm_phase_sm90_num_configs()),
                          ("gemm_kxs_sm90", core.gemm_kxs_sm90_num_configs())):
        assert count == len(kernels.BY_NAME[family].configs), (family, count)


def main(build_dir: str, units: list) -> int:
    root = Path(build_dir)
    units = units or extension.unit_names()
    print("flags:", " ".join(GENCODE), flush=True)
    core = extension.build_unit(extension.CORE, root, ["-Xptxas", "-v", *GENCODE], verbose=True)
    for unit in units:
        library = extension.build_unit(unit, root, ["-Xptxas", "-v", *GENCODE], verbose=True)
        extension.register_unit(core, unit, str(library))
    registered = core.registered_families()
    assert sorted(registered) == sorted(units), (registered, units)
    if sorted(units) == extension.unit_names():
        _config_names_match(core)
    print("extension built:", extension.CORE, *units, "- units registered:", *registered)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
