"""``python -m statelens.app.cli``: the command line without the desktop app launcher."""

import sys

from statelens.app.cli import main

sys.exit(main())
