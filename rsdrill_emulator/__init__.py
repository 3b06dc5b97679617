"""A MongoDB-wire-compatible replica-set member, run as its own process by the sandbox."""
