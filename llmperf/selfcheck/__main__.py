from llmperf.selfcheck.cli import main

raise SystemExit(main())
