"""`python -m deconv_patch.cli`: the console script."""

import sys

from . import main

sys.exit(main())
