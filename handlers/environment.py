"""What a function process serves, read from its environment once at start.

Both entrypoints (Lambda and HTTP) build their repository here, so an image
behaves the same on every platform:

- ``MODELFN_REPOSITORY``: a local model repository (baked into the image);
- ``MODELFN_MODELS``: which models to serve, comma-separated ``name[:version]``
  (default: every model in the repository);
- ``MODELFN_MAX_BODY_BYTES``: the request body limit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from modelfn.runtime.errors import ConfigError

DEFAULT_REPOSITORY = "/opt/modelfn/models"


@dataclass(frozen=True)
class FunctionEnvironment:
    repository: Path
    models: list[str] = field(default_factory=list)
    max_body_bytes: int | None = None

    @classmethod
    def read(cls, env: dict[str, str] | None = None) -> FunctionEnvironment:
        env = dict(os.environ) if env is None else env
        models = [m.strip() for m in env.get("MODELFN_MODELS", "").split(",") if m.strip()]
        limit = env.get("MODELFN_MAX_BODY_BYTES")
        if limit is not None and not limit.isdigit():
            raise ConfigError(f"MODELFN_MAX_BODY_BYTES must be a number of bytes, not '{limit}'")
        return cls(
            repository=Path(env.get("MODELFN_REPOSITORY", DEFAULT_REPOSITORY)),
            models=models,
            max_body_bytes=int(limit) if limit else None,
        )

    def model_names(self) -> list[str]:
        """Model names without pinned versions (``digits:2`` -> ``digits``)."""
        return [m.split(":", 1)[0] for m in self.models]
