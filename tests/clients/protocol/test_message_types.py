"""The generated message types (clients/protocol/message_types.py) match the declarations,
and mypy catches a misspelt field name with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.protocol import message_types, typegen
from clients.protocol.registry import APIS
from tests.test_layering import GENERATED_MARK

SNIPPET = '''
from clients.protocol.message_types import ProduceRequest, ProduceResponsePartitionResponse

def build(body: ProduceRequest) -> ProduceResponsePartitionResponse:
    for topic in body["topics"]:
        print(topic["name"], topic["partitons"])
    return {"index": 0, "eror_code": 0}
'''


def test_checked_in_module_is_what_the_generator_writes() -> None:
    """A declaration changed without running ``python3 -m clients.protocol.typegen``
    fails here."""
    assert Path(message_types.__file__).read_text() == typegen.generate(), (
        "clients/protocol/message_types.py is stale: run python3 -m clients.protocol.typegen")


def test_the_layering_test_knows_the_module_is_generated() -> None:
    """The size limits exempt generated code by its first line."""
    assert typegen.GENERATED_HEADER.startswith(GENERATED_MARK)
    assert Path(message_types.__file__).read_text().startswith(GENERATED_MARK)


def test_every_api_has_a_request_and_a_response_type() -> None:
    for api in APIS.values():
        for direction in ("Request", "Response"):
            assert isinstance(getattr(message_types, f"{api.name}{direction}"), type)


def test_a_decoded_body_carries_every_key_of_its_type() -> None:
    """Reading a decoded body with ``body[key]`` is safe for every key of the type (the
    decoder fills fields the version does not carry with their defaults)."""
    from clients.protocol.codec import decode_request, encode_request_bytes
    body = {"acks": 1, "timeout_ms": 5, "topics": [{"name": "t", "partitions": [
        {"index": 0, "records": b"x"}]}]}
    decoded = decode_request(encode_request_bytes(0, 3, 1, None, body)[4:]).body
    assert set(decoded) == set(message_types.ProduceRequest.__annotations__)
    partition = decoded["topics"][0]["partitions"][0]
    assert set(partition) == set(message_types.ProduceRequestPartition.__annotations__)
    assert isinstance(partition["records"], memoryview)


def test_mypy_rejects_a_misspelt_field_name(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    root = Path(typegen.__file__).resolve().parents[2]
    out, err, status = api.run([
        str(snippet), "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
        "--python-version", "3.11", "--follow-imports", "silent",
        "--config-file", str(root / "pyproject.toml"),
    ])
    assert status == 1, out + err
    assert '"partitons"' in out and '"eror_code"' in out, out
    assert out.count("error:") == 2, out
