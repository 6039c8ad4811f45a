from llmperf.serve.cli import main

main()
