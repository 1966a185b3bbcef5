"""The local Lambda: moto's Lambda API as the control plane, real environments executing it.

``LocalLambda`` serves moto (Lambda, IAM, ECR, S3, ... on one loopback endpoint, the
embedded S3 emulator's server) and executes what moto records. Plain boto3 clients create
functions, versions, aliases with ``RoutingConfig``, function URL configs, permissions and
reserved concurrency; the platform reads them back through the same public API (cached
until the next Lambda write passes through the endpoint) and runs:

- one pool of execution environments (``LambdaFunction``) per function version, started
  on demand, one invocation at a time each, as many as the reserved concurrency (or the
  local account limit) allows, reaped after ``idle_s`` without an invocation;
- one function URL front per URL config, on its own loopback port, invoking the URL's
  version or alias (an alias's ``AdditionalVersionWeights`` picked per request), with
  ``AWS_IAM`` (SigV4) or ``NONE`` (resource policy) auth as Lambda checks them;
- the ``Invoke`` API, on the same environments.

Each function version's environments write their output (what Lambda sends to CloudWatch)
to ``log_dir/lambda-<function>-<version>.log`` (``$LATEST`` as ``latest``) when a
``log_dir`` is given, else to the ``lambda_service`` logger.

A function's environment is what Lambda gives it: its ``Environment`` variables and the
``AWS_LAMBDA_*`` variables. A ``Zip`` function runs its handler from its unpacked code; an
``Image`` function runs its image's command (``ImageConfig.Command``, else modelfn's Lambda
handler). Process mode runs those with the installed Python and ``awslambdaric``;
``containers=True`` runs the image with podman instead.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import orjson
from botocore.config import Config

from modelfn.localstack.function_url import FunctionUrl, UrlConfig, UrlTarget
from modelfn.localstack.lambda_auth import public_access_allowed, verify_sigv4
from modelfn.localstack.lambda_service import FunctionConfig, LambdaFunction, Throttled
from modelfn.localstack.podman import PodmanLauncher
from modelfn.localstack.s3 import REGION, S3Emulator
from modelfn.platforms import aws_lambda
from modelfn.platforms.traffic import WeightedPicker

if TYPE_CHECKING:
    from collections.abc import Mapping

    from modelfn.localstack.lambda_service import InvocationResult
    from modelfn.localstack.sigv4 import HttpRequest

#: the handler of an ``Image`` function whose image sets no command: modelfn's Lambda image
IMAGE_HANDLER = "modelfn.handlers.aws_lambda.handler"
#: concurrent executions of the functions that reserve none (Lambda's default is 1000)
ACCOUNT_LIMIT = 10
#: what moto accepts and the dev environment writes; more keys come from moto's IAM users
DEFAULT_CREDENTIALS = {"testing": "testing"}


@dataclass(frozen=True)
class FunctionCounts:
    """What a function (or one of its versions) did: for tests and ``modelfn dev status``."""

    environments: int = 0  # alive now
    busy: int = 0  # running an invocation now
    cold_starts: int = 0  # environments started
    invocations: int = 0

    def __add__(self, other: FunctionCounts) -> FunctionCounts:
        return FunctionCounts(
            self.environments + other.environments,
            self.busy + other.busy,
            self.cold_starts + other.cold_starts,
            self.invocations + other.invocations,
        )


class LocalLambda:
    """``with LocalLambda() as aws: boto3.client("lambda", endpoint_url=aws.endpoint_url)``."""

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        idle_s: float = 300.0,
        containers: bool = False,
        account_limit: int = ACCOUNT_LIMIT,
        credentials: Mapping[str, str] | None = None,
        emulator: S3Emulator | None = None,
        region: str = REGION,
        log_dir: Path | None = None,
    ) -> None:
        self.idle_s = idle_s
        self.log_dir = log_dir
        self.containers = containers
        self.account_limit = account_limit
        self.region = region
        if credentials is None:  # the endpoint's own, when it checks signatures
            credentials = (emulator.credentials if emulator is not None else None) \
                or DEFAULT_CREDENTIALS
        self.credentials = dict(credentials)
        self._own_state = state_dir is None
        self.state_dir = Path(tempfile.mkdtemp(prefix="modelfn-lambda-")) if state_dir is None \
            else state_dir
        self._own_emulator = emulator is None
        self.emulator = S3Emulator() if emulator is None else emulator
        self._lock = threading.RLock()
        self._generation = 0
        self._cache: dict[tuple[Any, ...], Any] = {}
        self._cache_generation = -1
        self._pools: dict[tuple[str, str], tuple[str, LambdaFunction]] = {}
        self._retired: list[LambdaFunction] = []
        self._semaphores: dict[tuple[Any, ...], threading.Semaphore] = {}
        self._urls: dict[tuple[str, str | None], UrlConfig] = {}
        self._stopping = threading.Event()
        self._reaper: threading.Thread | None = None
        self._client: Any = None

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> LocalLambda:
        from modelfn.localstack.lambda_api import lambda_api_middleware

        self.emulator.add_middleware(lambda app: lambda_api_middleware(app, self))
        shutil.rmtree(self.state_dir / "tmp", ignore_errors=True)  # a killed run's
        if self._own_emulator:
            self.emulator.start()
        self._client = self.client("lambda", max_attempts=1)
        self._reaper = threading.Thread(target=self._reap, name="lambda-reaper", daemon=True)
        self._reaper.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._reaper is not None:
            self._reaper.join()
        with self._lock:
            urls, self._urls = list(self._urls.values()), {}
            pools = [pool for _, pool in self._pools.values()] + self._retired
            self._pools, self._retired = {}, []
        for config in urls:
            config.front.close()
        for pool in pools:
            pool.close()
        if self._own_emulator:
            self.emulator.stop()
        if self._own_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        else:  # the environments' own are gone with them; this clears a killed run's
            shutil.rmtree(self.state_dir / "tmp", ignore_errors=True)

    def __enter__(self) -> LocalLambda:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    @property
    def endpoint_url(self) -> str:
        """moto's endpoint: Lambda, IAM, ECR and S3 alike (``AWS_ENDPOINT_URL``)."""
        return self.emulator.endpoint_url

    def client(self, service: str, *, max_attempts: int = 2) -> Any:
        """A boto3 client for ``service`` at this endpoint with the first known credentials."""
        key, secret = next(iter(self.credentials.items()))
        make: Any = boto3.client  # typed per service literal; ``service`` is any name
        return make(
            service,
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=Config(retries={"max_attempts": max_attempts, "mode": "standard"}),
        )

    # ---- what tests and status read -------------------------------------------------------

    def log_path(self, function_name: str, version: str = "$LATEST") -> Path | None:
        """Where the environments of a function version write their output (None: to the
        logger)."""
        if self.log_dir is None:
            return None
        word = "latest" if version == "$LATEST" else version
        return self.log_dir / f"lambda-{function_name}-{word}.log"

    def function_url(self, function_name: str, qualifier: str | None = None) -> str:
        """The loopback URL serving ``function_name``'s URL config for ``qualifier``."""
        with self._lock:
            config = self._urls.get((function_name, qualifier))
        if config is None:
            raise KeyError(f"no function URL for {function_name}:{qualifier or '$LATEST'}")
        return config.url

    def counts(self, function_name: str, version: str | None = None) -> FunctionCounts:
        """Environments, cold starts and invocations of a function (or one version)."""
        total = FunctionCounts()
        with self._lock:
            pools = [
                pool for (name, v), (_, pool) in self._pools.items()
                if name == function_name and version in (None, v)
            ] + [p for p in self._retired if p.config.name == function_name and version is None]
        for pool in pools:
            total += FunctionCounts(pool.environments, pool.busy, pool.cold_starts,
                                    pool.invocations)
        return total

    def pids(self, function_name: str) -> list[int]:
        with self._lock:
            pools = [pool for (name, _), (_, pool) in self._pools.items() if name == function_name]
        return [pid for pool in pools for pid in pool.pids()]

    def status(self) -> dict[str, Any]:
        """Functions with their versions' counts, and the URLs served."""
        with self._lock:
            keys = sorted(self._pools)
            urls = sorted(self._urls.values(), key=lambda c: (c.function_name, c.qualifier or ""))
        functions: dict[str, Any] = {}
        for name, version in keys:
            functions.setdefault(name, {})[version] = vars(self.counts(name, version))
        return {
            "endpoint_url": self.endpoint_url,
            "functions": functions,
            "urls": [
                {"function": c.function_name, "qualifier": c.qualifier, "auth": c.auth_type,
                 "url": c.url}
                for c in urls
            ],
        }

    # ---- called by the API middleware -----------------------------------------------------

    def changed(self) -> None:
        """A Lambda write went through: what was read from moto may be stale."""
        with self._lock:
            self._generation += 1

    def url_configs(self) -> dict[tuple[str, str | None], UrlConfig]:
        return self._urls

    def add_url(self, config: UrlConfig) -> None:
        with self._lock:
            self._urls[(config.function_name, config.qualifier)] = config

    def remove_url(self, function_name: str, qualifier: str | None) -> UrlConfig | None:
        with self._lock:
            return self._urls.pop((function_name, qualifier), None)

    def serve_url(self, function_name: str, qualifier: str | None) -> FunctionUrl:
        """Start the front of a new URL config; its auth is read per request."""
        router = UrlTarget(self, function_name, qualifier)

        def authorize(request: HttpRequest) -> bool:
            return self._authorize(function_name, qualifier, request)

        return FunctionUrl(router, authorize=authorize).start()

    def function_deleted(self, function_name: str) -> None:
        """The function is gone: its URLs stop and its environments go."""
        with self._lock:
            urls = [k for k in self._urls if k[0] == function_name]
            configs = [self._urls.pop(k) for k in urls]
            keys = [k for k in self._pools if k[0] == function_name]
            pools = [self._pools.pop(k)[1] for k in keys]
        for config in configs:
            config.front.close()
        for pool in pools:
            pool.close()

    def invoke(
        self, function_name: str, qualifier: str | None, payload: bytes, **ids: Any
    ) -> tuple[str, InvocationResult]:
        """Invoke a version or alias (weights applied); the version that ran, and the result.

        Raises ``Throttled`` when the function reserves no concurrency (Lambda's off switch).
        Past its reservation an invocation waits for an environment here, where Lambda
        would answer 429 at once.
        """
        version = self._pick_version(function_name, qualifier)
        reserved = self._function(function_name, version)["Reserved"]
        if reserved == 0:
            raise Throttled(function_name, "ReservedFunctionConcurrentInvocationLimitExceeded")
        pool = self._pool(function_name, version)
        with self._concurrency(function_name, reserved):
            return version, pool.invoke_payload(payload, **ids)

    def _concurrency(self, function_name: str, reserved: int | None) -> threading.Semaphore:
        """Concurrent executions: a function's reservation spans all its versions; functions
        without one share the local account limit."""
        key = ("function", function_name, reserved) if reserved is not None else ("account",)
        with self._lock:
            semaphore = self._semaphores.get(key)
            if semaphore is None:
                limit = self.account_limit if reserved is None else int(reserved)
                semaphore = self._semaphores[key] = threading.Semaphore(limit)
            return semaphore

    # ---- reading moto through its public API ----------------------------------------------

    def _cached(self, key: tuple[Any, ...], read: Any) -> Any:
        with self._lock:
            if self._cache_generation != self._generation:
                self._cache, self._cache_generation = {}, self._generation
            if key in self._cache:
                return self._cache[key]
            generation = self._generation
        value = read()
        with self._lock:
            if self._generation == generation == self._cache_generation:
                self._cache[key] = value  # not if a write went through while reading
        return value

    def _pick_version(self, function_name: str, qualifier: str | None) -> str:
        if qualifier is None or qualifier == "$LATEST" or qualifier.isdigit():
            return qualifier or "$LATEST"

        def read() -> tuple[str, WeightedPicker[str]]:
            alias = self._client.get_alias(FunctionName=function_name, Name=qualifier)
            extra = (alias.get("RoutingConfig") or {}).get("AdditionalVersionWeights") or {}
            version = str(alias["FunctionVersion"])
            return version, WeightedPicker([(version, max(0.0, 1.0 - sum(extra.values()))),
                                            *((str(v), w) for v, w in extra.items())])

        split: tuple[str, WeightedPicker[str]] = self._cached(
            ("alias", function_name, qualifier), read)
        version, picker = split
        # never empty: the alias's own version takes the weight the others leave
        return picker.pick() or version

    def _function(self, function_name: str, version: str) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            found = self._client.get_function(FunctionName=function_name, Qualifier=version)
            reserved = self._client.get_function_concurrency(FunctionName=function_name)
            found["Reserved"] = reserved.get("ReservedConcurrentExecutions")
            return dict(found)

        return dict(self._cached(("function", function_name, version), read))

    def _pool(self, function_name: str, version: str) -> LambdaFunction:
        found = self._function(function_name, version)
        configuration = found["Configuration"]
        fingerprint = hashlib.sha256(orjson.dumps(
            [configuration, found.get("Code"), found["Reserved"]],
            default=str, option=orjson.OPT_SORT_KEYS,
        )).hexdigest()
        key = (function_name, version)
        with self._lock:
            current = self._pools.get(key)
            if current is not None and current[0] == fingerprint:
                return current[1]
        pool = LambdaFunction(self._function_config(found, version))
        with self._lock:
            current = self._pools.get(key)
            if current is not None and current[0] == fingerprint:
                pool.close()
                return current[1]
            if current is not None:
                self._retired.append(current[1])  # closed by the reaper once it is idle
            self._pools[key] = (fingerprint, pool)
        return pool

    def _function_config(self, found: dict[str, Any], version: str) -> FunctionConfig:
        configuration, code = found["Configuration"], found.get("Code") or {}
        name = configuration["FunctionName"]
        reserved = found["Reserved"]
        limit = self.account_limit if reserved is None else max(1, int(reserved))
        arn_parts = str(configuration["FunctionArn"]).split(":")
        task_root = self.state_dir / "functions" / name / version
        handler = configuration.get("Handler") or IMAGE_HANDLER
        launcher = None
        if configuration.get("PackageType") == "Image":
            command = (configuration.get("ImageConfigResponse") or {}).get(
                "ImageConfig", {}).get("Command") or []
            handler = command[0] if command else IMAGE_HANDLER
            task_root.mkdir(parents=True, exist_ok=True)
            if self.containers:
                launcher = PodmanLauncher(self.state_dir / "containers",
                                          str(code["ImageUri"]), tuple(command))
        else:
            self._unpack(name, version, task_root)
        return FunctionConfig(
            handler=handler,
            task_root=task_root,
            env=dict((configuration.get("Environment") or {}).get("Variables") or {}),
            name=name,
            timeout=float(configuration.get("Timeout") or 3),
            memory_mb=int(configuration.get("MemorySize") or 128),
            region=self.region,
            account=arn_parts[4] if len(arn_parts) > 4 else "123456789012",
            version=version,
            max_concurrency=limit,
            launcher=launcher,
            # the role's credentials: any key the platform knows works at its endpoint
            credentials=next(iter(self.credentials.items())),
            tmp_root=self.state_dir / "tmp",  # each environment's /tmp, removed with it
            log_path=self.log_path(name, version),
        )

    def _unpack(self, name: str, version: str, task_root: Path) -> None:
        """A Zip function's code, from moto's in-process state (the API only gives a URL)."""
        from moto.awslambda.models import lambda_backends
        from moto.core.models import DEFAULT_ACCOUNT_ID

        backend = lambda_backends[DEFAULT_ACCOUNT_ID][self.region]
        function = backend.get_function(name, None if version == "$LATEST" else version)
        if task_root.exists():
            shutil.rmtree(task_root)
        task_root.mkdir(parents=True)
        with zipfile.ZipFile(io.BytesIO(function.code_bytes)) as archive:
            archive.extractall(task_root)

    # ---- auth -----------------------------------------------------------------------------

    def _secret(self, access_key: str) -> str | None:
        if access_key in self.credentials:
            return self.credentials[access_key]
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.iam.models import iam_backends

        key = iam_backends[DEFAULT_ACCOUNT_ID]["aws"].access_keys.get(access_key)
        return None if key is None or key.status != "Active" else str(key.secret_access_key)

    def _authorize(self, function_name: str, qualifier: str | None, request: HttpRequest) -> bool:
        with self._lock:
            config = self._urls.get((function_name, qualifier))
        if config is None:
            return False
        if config.auth_type == aws_lambda.AUTH_TYPES["iam"]:
            return verify_sigv4(request, self._secret, region=self.region)

        def read() -> tuple[str, list[dict[str, Any]]]:
            arn = self._client.get_function_configuration(FunctionName=function_name)
            try:
                policy = self._client.get_policy(FunctionName=function_name)
            except self._client.exceptions.ResourceNotFoundException:
                return str(arn["FunctionArn"]), []
            return str(arn["FunctionArn"]), list(orjson.loads(policy["Policy"])["Statement"])

        arn, statements = self._cached(("policy", function_name), read)
        return public_access_allowed(statements, arn.split(":$LATEST")[0], qualifier)

    # ---- idle environments ----------------------------------------------------------------

    def _reap(self) -> None:
        interval = min(max(self.idle_s / 4, 0.05), 1.0)
        while not self._stopping.wait(interval):
            with self._lock:
                pools = [pool for _, pool in self._pools.values()]
                done = [pool for pool in self._retired if pool.busy == 0]
                self._retired = [pool for pool in self._retired if pool not in done]
            for pool in pools:
                pool.reap_idle(self.idle_s)
            for pool in done:
                pool.close()
