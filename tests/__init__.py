"""The test suite.

cpu/        tests that need no GPU
gpu/        GPU tests (marker `cuda`): gpu/<family>/ per kernel family, the rest at the top
emulation/  host emulations of the kernels' index math (markers `emulation` and `extended`:
            run with --extended)
Shared code: helpers.py (checks), cases.py (random configurations), corpus.py (model corpus).
"""
