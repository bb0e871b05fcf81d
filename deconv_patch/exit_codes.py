"""Exit codes of the `deconv-patch` console script, one per kind of failure.

Scripts and CI can branch on the code without parsing messages. 2 is argparse's usage error
(a missing command too), and `deconv-patch build`'s missing toolchain or failed compile, kept
for compatibility; `build` without a usable GPU is CUDA_UNAVAILABLE like every command.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Why `deconv-patch` stopped. Values are stable: append new ones, never renumber."""

    OK = 0                    # success, including "nothing to patch"
    VALIDATION_FAILED = 1     # the patched model missed its accuracy tolerances
    USAGE = 2                 # bad command line (argparse)
    FILE_UNREADABLE = 3       # input file missing, a directory, or not readable
    CORRUPT_FILE = 4          # truncated or corrupt checkpoint
    NOT_A_MODEL = 5           # loads, but holds neither a module nor a state_dict
    UNTRUSTED_PICKLE = 6      # a pickled module and no --trust-checkpoint
    STATE_DICT_MISMATCH = 7   # state_dict keys/shapes do not fit the --model architecture
    BAD_INPUT_SHAPE = 8       # the model rejected the --input-shape inputs
    CUDA_UNAVAILABLE = 9      # --device cuda... but no usable CUDA device
    OUT_OF_MEMORY = 10        # GPU out of memory (try a smaller batch)
    OUTPUT_EXISTS = 11        # OUT exists (no --force) or would overwrite IN
    UNSUPPORTED_FORMAT = 12   # TorchScript, or another format we cannot patch
    BAD_MODEL_SPEC = 13       # --model / --model-kwargs missing, malformed or failing
    WRITE_FAILED = 14         # could not write OUT or the report
    INTERNAL_ERROR = 70       # a bug: rerun with --debug and report the traceback


__all__ = ["ExitCode"]
