from llmperf.report.cli import main

raise SystemExit(main())
