"""`python -m tritoncheck.cli`."""

import sys

from tritoncheck.cli import main

sys.exit(main())
