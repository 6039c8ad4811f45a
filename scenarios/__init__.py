"""llmperf's Hydra config tree (a package so that it installs with the project)."""
