"""`llmperf-export`: a Hugging Face checkpoint folder from a preset's seeded random weights."""
