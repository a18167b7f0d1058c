"""``python -m fedaug`` is the ``fedaug`` command."""

import sys

from fedaug.cli import main

sys.exit(main())
