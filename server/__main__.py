"""`python -m server` starts ebbdb, as the `ebbdb` console script does."""

import sys

from server.cli import main

sys.exit(main())
