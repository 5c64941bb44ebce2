import sys

from sparkwatch.cli import main

sys.exit(main())
