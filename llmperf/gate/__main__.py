from llmperf.gate.cli import main

raise SystemExit(main())
