"""`python -m maxkernel.cli ...`: the same command line as the `maxkernel` script."""

import sys

from maxkernel.cli import main

sys.exit(main())
