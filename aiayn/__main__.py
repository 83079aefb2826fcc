"""``python -m aiayn ...`` (also ``torchrun -m aiayn train ...``)."""
import sys

from aiayn.cli import main

sys.exit(main())
