"""The V2 gateway: one endpoint in front of every deployed model and version."""
