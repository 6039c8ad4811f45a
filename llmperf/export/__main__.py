import sys

from llmperf.export.cli import main

sys.exit(main())
