"""`python -m envmatrix` (also how the runner calls itself inside an environment)."""

import sys

from .cli import main

sys.exit(main())
