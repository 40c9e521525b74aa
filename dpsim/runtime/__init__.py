"""Real runs: launching ranks, training loops, recorders that turn runs into Traces."""
