from llmperf.search.cli import main

main()
