"""``python -m reliability [--profile ci|nightly]``."""

import sys

from reliability.report import main

sys.exit(main())
