"""`python -m ebbdb` starts the server, as the `ebbdb` console script does."""

import sys

from ebbdb.server.cli import main

sys.exit(main())
