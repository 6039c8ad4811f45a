import sys

from llmperf.perf.cli import main

sys.exit(main())
