"""``python -m fastforward``: same as the ``fastforward`` script."""

import sys

from fastforward.cli import main

sys.exit(main())
