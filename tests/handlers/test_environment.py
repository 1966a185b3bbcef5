"""What a function reads from its environment, and the clear errors for what it cannot use."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelfn.handlers.environment import DEFAULT_REPOSITORY, FunctionEnvironment
from modelfn.runtime.errors import ConfigError


def test_defaults_serve_the_baked_repository_on_port_8080() -> None:
    env = FunctionEnvironment.read({})
    assert env.repository == Path(DEFAULT_REPOSITORY) and env.store is None
    assert (env.host, env.port, env.log_level) == ("0.0.0.0", 8080, "info")
    assert env.models == [] and env.max_body_bytes is None
    assert env.protocol == "http" and env.grpc_max_send_bytes is None
    assert env.busy_poll_us == 0


def test_everything_set() -> None:
    env = FunctionEnvironment.read({
        "MODELFN_REPOSITORY": "/models", "MODELFN_MODELS": "digits:2, mnist ,",
        "MODELFN_MAX_BODY_BYTES": "1024", "PORT": "9000", "MODELFN_HOST": "127.0.0.1",
        "MODELFN_LOG_LEVEL": "WARNING", "MODELFN_PROTOCOL": "gRPC",
        "MODELFN_GRPC_MAX_SEND_BYTES": "2048",
    })
    assert (env.protocol, env.grpc_max_send_bytes) == ("grpc", 2048)
    assert env.repository == Path("/models") and env.models == ["digits:2", "mnist"]
    assert env.model_names() == ["digits", "mnist"]
    assert (env.max_body_bytes, env.port, env.host, env.log_level) == (
        1024, 9000, "127.0.0.1", "warning")


def test_a_store_checks_out_into_a_temporary_directory_unless_a_repository_is_named() -> None:
    env = FunctionEnvironment.read({"MODELFN_STORE": "s3://b/models", "MODELFN_MODELS": "d"})
    assert env.store == "s3://b/models" and env.repository is None
    named = FunctionEnvironment.read({"MODELFN_STORE": "s3://b/m", "MODELFN_REPOSITORY": "/tmp/r"})
    assert named.repository == Path("/tmp/r")


@pytest.mark.parametrize(("name", "value", "message"), [
    ("PORT", "http", "PORT must be a whole number, not 'http'"),
    ("PORT", "70000", "PORT must be between 1 and 65535, not 70000"),
    ("MODELFN_MAX_BODY_BYTES", "6MB", "MODELFN_MAX_BODY_BYTES must be a whole number, not '6MB'"),
    ("MODELFN_LOG_LEVEL", "loud", "MODELFN_LOG_LEVEL must be one of debug, info, warning, error"),
    ("MODELFN_PROTOCOL", "rest", "MODELFN_PROTOCOL must be one of http, grpc, not 'rest'"),
    ("MODELFN_GRPC_MAX_SEND_BYTES", "1e6", "MODELFN_GRPC_MAX_SEND_BYTES must be a whole number"),
    ("MODELFN_BUSY_POLL_US", "50us", "MODELFN_BUSY_POLL_US must be a whole number, not '50us'"),
    ("MODELFN_BUSY_POLL_US", "2000000",
     r"MODELFN_BUSY_POLL_US must be at most 1000000 \(one second\), not 2000000"),
    ("MODELFN_EXIT_ON_ERROR", "maybe", "MODELFN_EXIT_ON_ERROR must be true or false, not 'maybe'"),
])
def test_bad_values_are_config_errors(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FunctionEnvironment.read({name: value})


@pytest.mark.parametrize(("value", "expected"), [
    (None, False), ("", False), ("false", False), ("0", False), ("true", True), ("1", True),
    ("Yes", True)])
def test_exit_on_error_is_off_unless_asked(value: str | None, expected: bool) -> None:
    env = {} if value is None else {"MODELFN_EXIT_ON_ERROR": value}
    assert FunctionEnvironment.read(env).exit_on_error is expected


def test_busy_polling_is_read_for_a_rest_function() -> None:
    assert FunctionEnvironment.read({"MODELFN_BUSY_POLL_US": "100"}).busy_poll_us == 100
    assert FunctionEnvironment.read({"MODELFN_BUSY_POLL_US": "0",
                                     "MODELFN_PROTOCOL": "grpc"}).busy_poll_us == 0


def test_busy_polling_a_grpc_function_is_refused_not_ignored() -> None:
    with pytest.raises(ConfigError, match="MODELFN_BUSY_POLL_US polls the REST server's loop; "
                                          "a function that serves gRPC alone takes its"):
        FunctionEnvironment.read({"MODELFN_BUSY_POLL_US": "100", "MODELFN_PROTOCOL": "grpc"})


@pytest.mark.parametrize("environment", [
    FunctionEnvironment(repository=Path(DEFAULT_REPOSITORY)),
    FunctionEnvironment(repository=None, models=["digits:2", "iris"], store="s3://b/models"),
    FunctionEnvironment(repository=Path("/srv/models"), models=["digits"], store="file:///s",
                        max_body_bytes=6 * 2**20, host="127.0.0.1", port=9000, log_level="debug"),
    FunctionEnvironment(repository=Path(DEFAULT_REPOSITORY), protocol="grpc",
                        grpc_max_send_bytes=2**20),
    FunctionEnvironment(repository=Path(DEFAULT_REPOSITORY), busy_poll_us=200),
    FunctionEnvironment(repository=Path(DEFAULT_REPOSITORY), exit_on_error=True),
])
def test_to_env_is_what_read_reads_back(environment: FunctionEnvironment) -> None:
    assert FunctionEnvironment.read(environment.to_env()) == environment


def test_to_env_leaves_the_platform_port_alone() -> None:
    env = FunctionEnvironment(repository=None, models=["digits:1"], store="s3://b/m").to_env()
    assert env == {"MODELFN_STORE": "s3://b/m", "MODELFN_MODELS": "digits:1"}
