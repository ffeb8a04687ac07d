"""``python -m ugrpo.cli <command> ...`` (also under torchrun / accelerate launch)."""

import sys

from ugrpo.cli.main import main

sys.exit(main())
