"""The trial harness: the runner, each arm's engine and settings, the server and vLLM's serving client."""
