"""``python -m modelfn.gateway``: the same as ``modelfn gateway``."""

from modelfn.cli.gateway import gateway

gateway(prog_name="python -m modelfn.gateway")
