"""The performance model: bytes and FLOPs per token, the roofline, predictions, cost and the capacity planner."""
