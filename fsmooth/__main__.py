"""``python -m fsmooth``: the command line of ``fsmooth.cli``."""
import sys

from .cli import main

sys.exit(main())
