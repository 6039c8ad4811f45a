import sys

from llmperf.plan.cli import main

sys.exit(main())
