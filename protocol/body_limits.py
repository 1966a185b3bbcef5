"""The two limits an infer body is held to, for the function and the gateway in front of it.

JSON is the costly way to send a tensor, so it has a limit of its own (``json``), below the
limit of the whole body (``body``) that Triton's binary extension may use. An infer request
is all JSON unless it names the length of its JSON header (``Inference-Header-Content-Length``):
then the header is held to the JSON limit and the body to the body limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelfn.protocol.content_coding import inflate
from modelfn.runtime.errors import InvalidInput, JsonTooLarge, ModelfnError, PayloadTooLarge


@dataclass(frozen=True, slots=True)
class BodyLimits:
    body: int  # bytes of a request body
    json: int  # bytes of JSON in an infer request, at most ``body``

    @classmethod
    def of(cls, body: int, json: int) -> BodyLimits:
        return cls(body, min(json, body))

    def infer(self, header_length: bytes | str | None) -> tuple[int | None, int]:
        """An infer request's binary-extension JSON length (None: all JSON) and the limit
        its body is read to; a JSON header over the JSON limit is refused here."""
        if header_length is None:
            return None, self.json
        if not header_length.strip().isdigit():
            text = header_length.decode(errors="replace") if isinstance(
                header_length, bytes) else header_length
            raise InvalidInput(f"Inference-Header-Content-Length '{text}' is not a number")
        length = int(header_length)
        if length > self.json and self.json < self.body:
            raise JsonTooLarge(length, self.json)
        return length, self.body

    def inflated(self, body: bytes, coding: str | None, header_length: int | None) -> bytes:
        """A compressed infer body inflated (``coding`` None: as it came), held to the limit
        an uncompressed one is: the JSON limit when it is all JSON, else the body's."""
        if coding is None:
            return body
        if header_length is None and self.json < self.body:
            return inflate(body, coding, self.json, "a request that is all JSON (binary "
                                                    "tensors may be larger)")
        return inflate(body, coding, self.body, "a request body")

    def too_large(self, size: int, header_length: int | None) -> ModelfnError:
        """The 413 of an infer body of ``size`` bytes read past its limit."""
        if header_length is None and self.json < self.body:  # all JSON
            return JsonTooLarge(size, self.json)
        return PayloadTooLarge(size, self.body if header_length is not None else self.json)
