"""Kafka's client setting names -> our clients' keywords (clients/config/kafka_names.py):
the tables match the clients' constructors, JAAS lines are parsed strictly, unknown
names and bad values are errors naming the setting, never a password."""

from __future__ import annotations

import inspect

import pytest

from clients.admin import Admin
from clients.config.kafka_names import (
    ADMIN,
    ADMIN_KEYWORDS,
    CONSUMER,
    PRODUCER,
    ClientNames,
    parse_jaas_config,
)
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.errors import InvalidConfigError

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.mark.parametrize(("names", "client"), [(ADMIN, Admin), (PRODUCER, Producer),
                                               (CONSUMER, Consumer)])
def test_every_keyword_is_a_setting_of_its_client(names: ClientNames, client: type) -> None:
    assert names.keywords <= set(inspect.signature(client).parameters)
    assert names.keywords >= ADMIN_KEYWORDS


def test_kafka_and_librdkafka_names_translate() -> None:
    jaas = f'{SCRAM} required username="alice" password="p\\"w;x";'
    assert CONSUMER.translate({
        "bootstrap.servers": "h:1", "client.id": " c ", "security.protocol": "sasl_ssl",
        "sasl.mechanism": "scram-sha-512", "sasl.jaas.config": jaas,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "", "request.timeout.ms": "2000",
        "partition.assignment.strategy":
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor,range",
        "enable.auto.commit": "FALSE",
    }) == {
        "bootstrap_servers": "h:1", "client_id": "c", "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
        "sasl_plain_password": 'p"w;x', "ssl_cafile": "/ca.pem", "ssl_check_hostname": False,
        "request_timeout_ms": 2000,
        "partition_assignment_strategy": ("cooperative-sticky", "range"),
        "enable_auto_commit": False,
    }  # fmt: skip
    assert PRODUCER.translate({
        "sasl.mechanisms": "PLAIN", "sasl.username": "bob", "sasl.password": " pw ",
        "ssl.ca.location": "ca.pem", "ssl.certificate.location": "c.pem",
        "ssl.key.location": "c.key", "ssl.key.password": "kp", "acks": "all",
        "linger.ms": "7", "compression.type": "zstd",
        "ssl.endpoint.identification.algorithm": "https",
    }) == {
        "sasl_mechanism": "PLAIN", "sasl_plain_username": "bob", "sasl_plain_password": " pw ",
        "ssl_cafile": "ca.pem", "ssl_certfile": "c.pem", "ssl_keyfile": "c.key",
        "ssl_password": "kp", "acks": "all", "linger_ms": 7, "compression_type": "zstd",
        "ssl_check_hostname": True,
    }  # fmt: skip
    # our own keywords only when asked (the CLI's older spellings)
    assert PRODUCER.translate({"linger_ms": "3", "ssl.cafile": "a.pem"}, our_names=True) == \
        {"linger_ms": 3, "ssl_cafile": "a.pem"}
    with pytest.raises(InvalidConfigError, match="unknown Producer setting 'linger_ms'"):
        PRODUCER.translate({"linger_ms": "3"})


def test_jaas_lines_are_parsed_strictly() -> None:
    assert parse_jaas_config(f'{PLAIN} required username="a" password="b";') == {
        "sasl_plain_username": "a", "sasl_plain_password": "b"}
    assert parse_jaas_config(f'\n  {SCRAM}  optional\n password="b"  username="a"  ;  ') == {
        "sasl_plain_username": "a", "sasl_plain_password": "b"}
    secret = "hunter2-secret"
    for line, message in (
        (f'{SCRAM} required username="a" password="{secret}"', "ending in ';'"),
        (f'com.sun.security.auth.module.Krb5LoginModule required password="{secret}";',
         "login module 'com.sun.security.auth.module.Krb5LoginModule' is not supported"),
        (f'{SCRAM} needed username="a" password="{secret}";', "'needed' is not a control flag"),
        (f'{SCRAM} required username=a password="{secret}";', "values in double quotes"),
        (f'{SCRAM} required username="a" password="{secret}" tokenauth="true";',
         "option 'tokenauth' is not supported"),
        (f'{SCRAM} required username="a" username="b" password="{secret}";',
         "option 'username' is given twice"),
        (f'{SCRAM} required username="a";', "has no password"),
        (f'{SCRAM} required username="a" password="{secret}"; {PLAIN} required;',
         "values in double quotes"),
    ):
        with pytest.raises(InvalidConfigError, match=message) as caught:
            ADMIN.translate({"sasl.jaas.config": line})
        assert secret not in str(caught.value), caught.value


@pytest.mark.parametrize(("given", "message"), [
    ({"no.such.setting": "1"}, "unknown Admin setting 'no.such.setting'"),
    ({"linger.ms": "5"}, "unknown Admin setting 'linger.ms'"),  # a producer's, not admin's
    ({"ssl.truststore.location": "/ts.jks"},
     "setting 'ssl.truststore.type': 'JKS' stores are not supported"),
    ({"ssl.keystore.type": "PKCS12"}, "'PKCS12' stores are not supported"),
    ({"security.protocol": "SASL_PLAIN"}, "setting 'security.protocol' must be one of "
                                          "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"sasl.mechanism": "GSSAPI"}, "'sasl.mechanism' must be one of SCRAM-SHA-256, "
                                   "SCRAM-SHA-512, PLAIN, got 'GSSAPI'"),
    ({"request.timeout.ms": "soon"}, "'request.timeout.ms' must be an integer, got 'soon'"),
    ({"ssl.endpoint.identification.algorithm": "http"}, "must be https or empty"),
    ({"ssl.ca.location": "a.pem", "ssl.truststore.location": "b.pem",
      "ssl.truststore.type": "PEM"}, "'ssl.ca.location' and setting "
                                     "'ssl.truststore.location' give different values"),
    ({"sasl.username": "a", "sasl.jaas.config": f'{SCRAM} required username="b" '
                                                'password="c";'}, "different values"),
])
def test_unknown_names_and_bad_values_name_the_setting(given: dict[str, str],
                                                       message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        ADMIN.translate(given)


def test_a_password_value_is_never_shown() -> None:
    with pytest.raises(InvalidConfigError) as caught:
        CONSUMER.translate({"ssl.key.password": "k", "sasl.password": "s3cr3t",
                            "sasl.jaas.config": f'{SCRAM} required username="u" '
                                                'password="other";'})
    assert "s3cr3t" not in str(caught.value) and "other" not in str(caught.value)
    with pytest.raises(InvalidConfigError, match=r"option 'kafka\.max\.poll\.records' must be") \
            as bad:
        CONSUMER.translate({"max.poll.records": "many"},
                           label=lambda n: f"option 'kafka.{n}'")
    assert "many" in str(bad.value)  # not a secret: shown
