"""``python -m fedaug`` is the ``fedaug`` command."""

import sys

from fedaug.cli.main import main

sys.exit(main())
