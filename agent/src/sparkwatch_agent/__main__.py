import sys

from sparkwatch_agent.cli import main

sys.exit(main())
