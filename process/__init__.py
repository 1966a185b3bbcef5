"""Supervised child processes: start, probe until ready, drain with SIGTERM, reap the group."""
