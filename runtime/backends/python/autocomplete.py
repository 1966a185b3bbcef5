"""Triton's ``auto_complete_config``: the object a Python model's static
``auto_complete_config(auto_complete_model_config)`` receives (in the worker), and what the
server takes back from it (``completed``).

The model sees the config as Triton's JSON form (``as_dict``) and may add inputs and outputs,
set ``max_batch_size``, turn on dynamic batching and set the transaction policy. Only those
fields come back: the rest of the config is the server's, as in Triton.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from modelfn.runtime.config import DynamicBatching, ModelConfig, TensorConfig
from modelfn.runtime.datatypes import BY_CONFIG
from modelfn.runtime.errors import ConfigError

_INPUT_FIELDS = frozenset({"name", "data_type", "dims", "optional"})
_OUTPUT_FIELDS = frozenset({"name", "data_type", "dims"})


class AutoCompleteConfig:
    """``pb_utils.ModelConfig``: the model's config as auto-complete builds it up."""

    def __init__(self, model_config: dict[str, Any]) -> None:
        self._config = model_config
        self._config.setdefault("input", [])
        self._config.setdefault("output", [])
        self._config.setdefault("max_batch_size", 0)

    @property
    def _name(self) -> str:
        return str(self._config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        if not isinstance(max_batch_size, int) or max_batch_size < 0:
            raise ValueError(f"model '{self._name}': max_batch_size must be a whole number "
                             f">= 0, not {max_batch_size!r}")
        configured = int(self._config["max_batch_size"])
        if configured > max_batch_size:
            raise ValueError(f"configuration specified max_batch_size {configured}, but "
                             f"auto_complete_config of model '{self._name}' specified "
                             f"max_batch_size {max_batch_size}")
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._config:
                raise ValueError(f"model '{self._name}' is configured with {scheduler}; "
                                 "auto_complete_config cannot set dynamic_batching")
        self._config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        self._config["model_transaction_policy"] = dict(transaction_policy_dict)

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 - Triton's name
        self._add("input", input, _INPUT_FIELDS)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output, _OUTPUT_FIELDS)

    def _add(self, kind: str, tensor: dict[str, Any], fields: frozenset[str]) -> None:
        name = tensor.get("name")
        extra = sorted(set(tensor) - fields)
        if extra:
            raise ValueError(f"{kind} '{name}' of model '{self._name}' has properties "
                             f"{extra}; an {kind} takes only {sorted(fields)}")
        for required in ("name", "data_type", "dims"):
            if required not in tensor:
                raise ValueError(f"{kind} '{name}' of model '{self._name}' lacks "
                                 f"'{required}'")
        for current in self._config[kind]:
            if current["name"] != name:
                continue
            if current.get("data_type", "TYPE_INVALID") not in ("TYPE_INVALID",
                                                                 tensor["data_type"]):
                raise ValueError(f"model '{self._name}' {kind} '{name}': the configuration "
                                 f"says {current['data_type']}, the model "
                                 f"{tensor['data_type']}")
            if current.get("dims") and list(current["dims"]) != list(tensor["dims"]):
                raise ValueError(f"model '{self._name}' {kind} '{name}': the configuration "
                                 f"says dims {list(current['dims'])}, the model "
                                 f"{list(tensor['dims'])}")
            current.update(copy.deepcopy(tensor))
            return
        self._config[kind].append(copy.deepcopy(tensor))


def completed(config: ModelConfig, doc: dict[str, Any]) -> ModelConfig:
    """``config`` with what the model's ``auto_complete_config`` left in ``doc``: inputs,
    outputs, ``max_batch_size`` and dynamic batching. A decoupled policy is refused."""
    where = config.source or None
    if doc.get("model_transaction_policy", {}).get("decoupled"):
        raise ConfigError(f"model '{config.name}' is decoupled, which modelfn does not serve: "
                          "return one response per request from execute", path=where)
    try:
        inputs = [_tensor(t, config.input(t["name"]), "input") for t in doc.get("input", [])]
        outputs = [_tensor(t, config.output(t["name"]), "output")
                   for t in doc.get("output", [])]
        max_batch_size = int(doc.get("max_batch_size", 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"model '{config.name}': auto_complete_config gave a config that "
                          f"does not read: {exc}", path=where) from None
    explicit = config.explicit
    if max_batch_size != config.max_batch_size:
        explicit = explicit | {"max_batch_size"}
    batching = config.dynamic_batching
    if batching is None and "dynamic_batching" in doc:
        batching = DynamicBatching()
    return replace(config, inputs=inputs, outputs=outputs, max_batch_size=max_batch_size,
                   dynamic_batching=batching, explicit=explicit)


def _tensor(doc: dict[str, Any], known: TensorConfig | None, kind: str) -> TensorConfig:
    datatype = BY_CONFIG.get(doc["data_type"])
    if datatype is None:
        raise ValueError(f"{kind} '{doc['name']}' has data_type {doc['data_type']!r}, which "
                         f"is none of {', '.join(BY_CONFIG)}")
    dims = tuple(int(d) for d in doc["dims"])
    if known is not None:  # the config's own fields (reshape, format, labels) stay
        return replace(known, datatype=datatype, dims=dims,
                       optional=bool(doc.get("optional", known.optional)))
    return TensorConfig(str(doc["name"]), datatype, dims, optional=bool(doc.get("optional")))
