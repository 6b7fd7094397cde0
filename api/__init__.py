"""runsink's HTTP API: the agent-facing answers, as the contract writes them."""
