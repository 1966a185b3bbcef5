"""``modelfn invoke``: one V2 inference against any URL (a function, a function URL, the
gateway), its outputs on stdout as a table or as the V2 response JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from modelfn.cli.errors import exit_on_error
from modelfn.cli.params import DURATION
from modelfn.client.auth import AUTHS
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.client.v2 import Output

#: values shown per output in the table before it says how many more there are
SHOWN = 16
F = TypeVar("F", bound="Callable[..., Any]")


def auth_options(command: F) -> F:
    """``--auth``, ``--api-key`` and ``--region``: the client's credentials, for ``invoke``
    and ``bench`` (``RequestAuth.for_url``)."""
    for option in (
        click.option("--region", envvar="MODELFN_REGION",
                     help="SigV4 region (default: a lambda-url host's own, else AWS_REGION "
                          "or AWS_DEFAULT_REGION): AWS checks the signature against the "
                          "URL's region."),
        click.option("--api-key", envvar="MODELFN_API_KEY",
                     help="A gateway API key, sent as 'Authorization: Bearer <key>' (implies "
                          "--auth key)."),
        click.option("--auth", type=click.Choice(list(AUTHS)), default=None,
                     envvar="MODELFN_AUTH",
                     help="iam: SigV4 for AWS_IAM function URLs (credentials from the "
                          "standard chain); key: a gateway API key. [default: key with an "
                          "API key, else none]"),
    ):
        command = option(command)
    return command


def _inputs_from_json(doc: Any, where: str, metadata: Callable[[], dict[str, Any]]
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A V2 request document, or ``{name: nested list}`` typed by the model's metadata:
    as numpy arrays, with the document's ``id``, ``parameters`` and ``outputs``."""
    import numpy as np

    from modelfn.client.bodies import LoadgenError, inputs_from_v2_json, request_fields
    from modelfn.client.endpoint import typed_array
    from modelfn.runtime.datatypes import BY_V2

    if isinstance(doc, dict) and "inputs" in doc:
        try:
            return inputs_from_v2_json(doc), request_fields(doc)
        except LoadgenError as exc:
            raise InvalidInput(f"{where}: {exc.message}") from None
    if isinstance(doc, dict) and doc:
        specs = {spec["name"]: spec["datatype"] for spec in metadata()["inputs"]}
        unknown = sorted(set(doc) - set(specs))
        if unknown:
            raise InvalidInput(f"{where}: the model has no input {', '.join(unknown)} "
                               f"(inputs: {', '.join(specs)})")
        inputs = {}
        for name, value in doc.items():
            datatype = BY_V2.get(specs[name])
            if datatype is None:
                raise InvalidInput(f"{where}: the model's input {name} is {specs[name]}, a "
                                   "datatype this client does not know")
            try:
                inputs[name] = typed_array(value, datatype).reshape(np.shape(value))
            except ValueError as exc:
                raise InvalidInput(f"{where}: input '{name}': {exc}") from None
        return inputs, {}
    raise InvalidInput(f"{where}: expected a V2 request ({{\"inputs\": [...]}}) or "
                       "{\"<input name>\": <nested list>}")


def _table(header: dict[str, Any], outputs: list[Output]) -> str:
    lines = [f"{header.get('model_name', '?')} version {header.get('model_version', '?')}"
             + (f"  id {header['id']}" if "id" in header else "")]
    for output in outputs:
        flat = output.data.ravel()
        values = [v.decode(errors="replace") if isinstance(v, bytes)
                  else float(f"{v:.6g}") if isinstance(v, float) else v
                  for v in flat[:SHOWN].tolist()]
        more = f" ... ({flat.size - SHOWN} more)" if flat.size > SHOWN else ""
        lines.append(f"  {output.name:<16} {output.datatype:<6} {str(output.shape):<12} "
                     f"{values}{more}")
    return "\n".join(lines)


@click.command()
@click.argument("url")
@click.option("--model", "-m", envvar="MODELFN_MODEL",
              help="Model name (default: the one URL names, when it is a model's URL).")
@click.option("--version", envvar="MODELFN_VERSION", help="Model version (default: the one "
              "URL names, else the server's choice, or the deployed split behind a gateway).")
@click.option("--input", "input_path", type=click.Path(dir_okay=False, path_type=Path),
              help="A V2 request .json, {name: values} .json, or a .npy array (one-input "
                   "models).")
@click.option("--data", help="The request as inline JSON, like an --input .json file.")
@click.option("--binary", is_flag=True, help="Send tensors with Triton's binary extension and "
              "ask for binary outputs.")
@auth_options
@click.option("--timeout", "timeout_s", default="60s", show_default=True, type=DURATION,
              help="How long to wait for the answer.")
@click.option("--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True, envvar="MODELFN_OUTPUT",
              help="json: only the V2 response on stdout.")
def invoke(url: str, model: str | None, version: str | None, input_path: Path | None,
           data: str | None, binary: bool, auth: str | None, api_key: str | None,
           region: str | None, timeout_s: float, output: str) -> None:
    """Send one V2 inference request to URL and print the outputs.

    URL is a server's base URL (a function, a function URL, the gateway), or a model's
    URL pasted whole (.../v2/models/NAME[/versions/V][/infer]), which names the model.
    """
    with exit_on_error():
        from modelfn.client.auth import choose_auth
        from modelfn.client.bodies import load_inputs
        from modelfn.client.endpoint import split_v2_url
        from modelfn.client.loadgen import normalize_url
        from modelfn.client.v2 import V2Client, as_json

        if (input_path is None) == (data is None):
            raise InvalidInput("give the request with --input FILE or --data JSON (one of them)")
        pasted = split_v2_url(normalize_url(url))
        model = _named("--model", model, pasted.model, url)
        version = _named("--version", version, pasted.version, url)
        if model is None:
            raise InvalidInput("give the model with --model NAME, or a model's URL "
                               "(.../v2/models/NAME[/infer])")
        client = V2Client(pasted.base, auth=choose_auth(auth, api_key), api_key=api_key,
                          region=region, timeout_s=timeout_s)
        fields: dict[str, Any] = {}
        if data is not None:
            inputs, fields = _inputs_from_json(_parse(data, "--data"), "--data",
                                               lambda: client.metadata(model, version))
        else:
            assert input_path is not None
            if not input_path.is_file():
                raise InvalidInput(f"{input_path}: no such file")
            if input_path.suffix == ".npy":
                # the metadata's own errors are the server's, not the file's
                inputs = load_inputs(input_path, client.metadata(model, version))
            elif input_path.suffix == ".json":
                inputs, fields = _inputs_from_json(
                    _parse(_read(input_path), str(input_path)), str(input_path),
                    lambda: client.metadata(model, version))
            else:
                raise InvalidInput(f"{input_path}: expected a .json request or a .npy array")
        header, outputs = client.infer(model, inputs, binary=binary, version=version,
                                       fields=fields)
        if output == "json":
            click.echo(json.dumps(as_json(header, outputs)))
        else:
            click.echo(_table(header, outputs))


def _named(option: str, given: str | None, in_url: str | None, url: str) -> str | None:
    """The model (or version) from ``option`` or from the URL: a value set in the
    environment gives way to the URL's, one typed on the command line must agree with it."""
    from click.core import ParameterSource

    if given is None or in_url is None or given == in_url:
        return in_url if given is None else given
    source = click.get_current_context().get_parameter_source(option.lstrip("-"))
    if source == ParameterSource.ENVIRONMENT:
        return in_url
    raise InvalidInput(f"{option} {given} conflicts with the URL, which names {in_url} "
                       f"({url}): give one of them, or the same")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: cannot read it: {exc}") from None


def _parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{where} is not JSON: {exc}") from None
