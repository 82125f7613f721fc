"""``python -m memfs.cli``: the ``memfs`` command (the tests run it so)."""

import sys

from memfs.cli import main

sys.exit(main())
