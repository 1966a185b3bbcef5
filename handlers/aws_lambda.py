"""The AWS Lambda entrypoint: ``modelfn.handlers.aws_lambda.handler``.

Importing this module is the function's init phase, once per execution environment: it
reads ``FunctionEnvironment``, loads and warms every model and builds the V2 app. A model
that cannot load raises here, so awslambdaric reports it as the init error (``errorType``
is the modelfn exception, ``errorMessage`` names the config file and line) and Lambda never
routes a request to a half-working function.

Each invocation is one HTTP request (function URL or HTTP API payload 2.0 events) run
through Mangum with lifespan off: Mangum would run lifespan on every invocation, and
nothing needs starting per request. Mangum decodes base64 request bodies; responses are
text when JSON or ``text/*`` and base64 otherwise (Triton's binary tensor extension,
``application/octet-stream``). Lambda refuses a response over 6 MB with an opaque error, so
one that would be larger once JSON-encoded becomes a V2 413 error here instead.

With SnapStart, this init runs once per published version and environments are restored
from its snapshot; ``handlers/snapstart.py`` says what a restored one redoes (random seeds,
the store's connections) and registers that as an after-restore hook.

Powertools adds JSON logs (service ``modelfn``; every ``modelfn.*`` logger goes through
them, and each invocation logs its method, path and status) with ``cold_start`` and the
request id, and EMF metrics in namespace ``modelfn``:
``ColdStart``, and per infer ``ModelLatency`` (ms in the batcher: queue and compute) and
``BatchSize`` (rows per execution) with ``model`` and ``version`` dimensions. They are
the served version's statistics after the request minus before it: an execution
environment runs one invocation at a time, so the difference is this request's alone, and
it costs a copy of five integers instead of a timer around the app.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from mangum import Mangum

from modelfn.handlers import snapstart
from modelfn.handlers.boot import open_function_repository
from modelfn.handlers.environment import FunctionEnvironment
from modelfn.handlers.lambda_http import PAYLOAD_LIMIT, TEXT_MIME_TYPES, check_event, within_limit
from modelfn.handlers.startup import paused_collector
from modelfn.protocol.rest import create_app
from modelfn.runtime.errors import ModelNotFound

if TYPE_CHECKING:
    from mangum.types import LambdaContext

    from modelfn.runtime.model import ModelVersion
    from modelfn.runtime.stats import ModelStats

_INFER_PATH = re.compile(r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?/infer")

log = logging.getLogger("modelfn.lambda")


@dataclass(frozen=True, slots=True)
class _Counts:
    """The few statistics of a model version the per-invocation metrics are made from."""

    success: int
    success_ns: int
    failures: int
    inferences: int
    executions: int

    @classmethod
    def of(cls, stats: ModelStats) -> _Counts:
        return cls(stats.success.count, stats.success.ns, stats.fail.count,
                   stats.inference_count, stats.execution_count)


def served_model(path: str) -> ModelVersion | None:
    """The model version an infer request is for, if it is one this function serves."""
    match = _INFER_PATH.fullmatch(path)
    if match is None:
        return None
    try:
        return repository.get(match["model"], match["version"])
    except ModelNotFound:
        return None


def record_metrics(model: ModelVersion, before: _Counts) -> None:
    after = _Counts.of(model.stats)
    metrics.add_dimension("model", model.name)
    metrics.add_dimension("version", model.version_str)
    if after.success > before.success:
        latency_ms = (after.success_ns - before.success_ns) / 1e6
        metrics.add_metric("ModelLatency", MetricUnit.Milliseconds, latency_ms)
    if after.executions > before.executions:
        rows = (after.inferences - before.inferences) / (after.executions - before.executions)
        metrics.add_metric("BatchSize", MetricUnit.Count, rows)
    if after.failures > before.failures:
        metrics.add_metric("InferenceFailures", MetricUnit.Count, after.failures - before.failures)


logger = Logger(service="modelfn")
logging.getLogger("mangum").setLevel(logging.WARNING)  # its per-request text line: ours is JSON
metrics = Metrics(namespace="modelfn", service="modelfn")
# health, metadata and stats invocations have no model metrics: expected, not worth a warning
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)

function = FunctionEnvironment.read()
with paused_collector():  # init is billed (and bounded: 10 s); collections there are waste
    # one invocation at a time per environment: a queue delay would only add latency
    repository = open_function_repository(
        function.repository, function.models or None, store=function.store,
        strict=function.exit_on_error, one_request_at_a_time=True,
    )
# one invocation at a time per environment: nothing can wait behind a large JSON body, and
# Lambda has no /dev/shm for a process pool, so bodies are always decoded inline
app = create_app(
    repository, max_body_bytes=function.max_body_bytes or PAYLOAD_LIMIT, offload_bytes=None,
    stop_on_shutdown=False,
)
adapter = Mangum(app, lifespan="off", text_mime_types=TEXT_MIME_TYPES)
# SnapStart: a restored copy of this environment re-seeds and reconnects (handlers/snapstart)
snapstart.install(repository)


@logger.inject_lambda_context(log_event=False, clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    checked = check_event(event)
    if "response" in checked:
        log.info("malformed event: %s", checked["response"]["body"])
        return dict(checked["response"])
    event = checked["event"]
    path = str(event.get("rawPath") or event.get("path") or "")
    model = served_model(path)
    before = _Counts.of(model.stats) if model is not None else None
    response = within_limit(adapter(event, context))
    if model is not None and before is not None:
        record_metrics(model, before)
    http = event.get("requestContext", {}).get("http", {})
    method = http.get("method") or event.get("httpMethod")
    log.info("%s %s %s", method, path, response["statusCode"])
    return response
