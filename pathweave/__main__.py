import sys

from pathweave.cli import main

sys.exit(main())
