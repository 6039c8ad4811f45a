"""What the load generator sends: arrival times, prompt and output lengths, requests."""
