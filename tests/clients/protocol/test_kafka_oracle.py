"""Our declarations against an implementation no one here wrote: kafka-python's schemas.

For every API we serve that kafka-python knows, at every version we serve, in both
directions: random bodies encoded by our codec are decoded by kafka-python's own
schema-driven structs and re-encoded by them; the bytes must be identical.  A field in
the wrong place, of the wrong type, in the wrong versions or wrongly tagged changes the
bytes (or fails kafka-python's decoder).  Our own extras (tagged fields with tags from
1000 up) are left out: kafka-python drops unknown tags, as every Kafka client does.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import random
from typing import Any

import pytest

from clients.protocol.codec import encode_request_bytes, encode_response_bytes
from clients.protocol.registry import APIS
from tests.clients.protocol.wire_values import random_body

kafka_protocol = pytest.importorskip("kafka.protocol", reason="kafka-python is the oracle")
from kafka.protocol.api_message import ApiMessage  # noqa: E402

EXAMPLES = 25


def _kafka_python_classes() -> dict[tuple[int, str], Any]:
    found: dict[tuple[int, str], Any] = {}
    for info in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        for name in dir(module):
            obj = getattr(module, name)
            if (isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage
                    and getattr(obj, "_class_version", 1) is None):
                found[(obj.API_KEY, obj.type)] = obj
    return found


CLASSES = _kafka_python_classes()
CASES = [
    pytest.param(api.key, version, kind, id=f"{api.name}-v{version}-{kind}")
    for api in APIS.values()
    for version in range(api.min_version, api.max_version + 1)
    for kind in ("request", "response")
    if (int(api.key), kind) in CLASSES
]


def _body_bytes(api_key: int, version: int, kind: str, body: dict[str, Any]) -> bytes:
    api = APIS[api_key]
    if kind == "response":
        frame = encode_response_bytes(api_key, version, 7, body)
        header = 4 + (1 if api.response_header_version(version) == 1 else 0)
    else:
        frame = encode_request_bytes(api_key, version, 7, "oracle", body)
        header = 10 + len("oracle") + (1 if api.request_header_version(version) == 2 else 0)
    return frame[4 + header:]


def test_every_api_kafka_python_knows_is_checked() -> None:
    served = {(int(a.key), k) for a in APIS.values() for k in ("request", "response")}
    assert len(served & set(CLASSES)) >= 2 * 7  # the client-facing APIs


@pytest.mark.parametrize(("api_key", "version", "kind"), CASES)
def test_kafka_python_reads_and_rewrites_our_bytes_identically(
    api_key: int, version: int, kind: str
) -> None:
    api = APIS[api_key]
    st = api.response if kind == "response" else api.request
    flexible = api.is_flexible(version)
    oracle = CLASSES[(int(api_key), kind)]._struct
    rng = random.Random(f"{api.name}-{version}-{kind}")
    for _ in range(EXAMPLES):
        body = random_body(st, version, rng, ours=False)
        ours = _body_bytes(api_key, version, kind, body)
        decoded = oracle.decode(io.BytesIO(ours), version=version, compact=flexible,
                                tagged=flexible)
        theirs = oracle.encode(decoded, version=version, compact=flexible, tagged=flexible)
        assert bytes(theirs) == ours, f"{api.name} v{version} {kind}: {body!r}"
