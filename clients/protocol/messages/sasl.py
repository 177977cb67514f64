"""SASL authentication APIs: SaslHandshake, SaslAuthenticate (KIP-43, KIP-152).

Versions served: SaslHandshake 0-1 (never flexible), SaslAuthenticate 0-2 (flexible 2+);
Kafka's layouts, field names in snake_case.  A client sends SaslHandshake v1 to pick a
mechanism, then wraps each SASL token in SaslAuthenticate; after a v0 handshake the
tokens follow as raw length-prefixed frames instead (a broker must handle both).  No
tagged extras of ours.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.schema import BYTES, INT16, INT64, STRING, Array, Field, Struct

SASL_HANDSHAKE = Api(
    ApiKey.SASL_HANDSHAKE, "SaslHandshake", "0-1", None,
    request=Struct(
        Field("mechanism", STRING),  # e.g. "PLAIN", "SCRAM-SHA-256"
    ),
    response=Struct(
        Field("error_code", INT16),
        Field("mechanisms", Array(STRING)),  # the mechanisms the broker enables
    ),
)  # fmt: skip

SASL_AUTHENTICATE = Api(
    ApiKey.SASL_AUTHENTICATE, "SaslAuthenticate", "0-2", "2+",
    request=Struct(
        Field("auth_bytes", BYTES),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field("auth_bytes", BYTES),
        # v1+: ms until the session expires and must re-authenticate (0: never, KIP-368)
        Field("session_lifetime_ms", INT64, "1+"),
    ),
)  # fmt: skip
