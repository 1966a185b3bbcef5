"""Kubernetes quantities: the CPU and memory amounts of a container's ``resources``.

Deploy checks a user's ``--cpu`` and ``--memory`` with them and the local platform reads a
template's ``resources.limits`` with them, so both accept and refuse the same spellings:
``"500m"``, ``"2"``, ``"1.5"`` cores; ``"512Mi"``, ``"2Gi"``, ``"1G"``, ``"1000000"`` bytes.
"""

from __future__ import annotations

import re

from modelfn.runtime.errors import InvalidInput

_CPU = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_MEMORY_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                 "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def cpu_cores(quantity: str) -> float:
    """A Kubernetes CPU quantity in cores (``"500m"`` -> 0.5)."""
    match = _CPU.match(quantity.strip())
    if match is None or float(match.group(1)) <= 0:
        raise InvalidInput(f"CPU '{quantity}' is not a quantity like 1, 2.5 or 500m")
    value = float(match.group(1))
    return value / 1000 if match.group(2) else value


def memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity in bytes (``"2Gi"`` -> 2147483648)."""
    match = _MEMORY.match(quantity.strip())
    if match is None or float(match.group(1)) <= 0:
        raise InvalidInput(f"memory '{quantity}' is not a quantity like 512Mi, 2Gi or 1G")
    return int(float(match.group(1)) * _MEMORY_UNITS[match.group(2)])
