"""``python -m sqlq_orm``: the same as the ``sqlq`` command."""

import sys

from sqlq_orm.cli import main

if __name__ == "__main__":
    sys.exit(main())
