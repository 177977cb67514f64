"""Kafka's SCRAM user admin APIs (DescribeUserScramCredentials,
AlterUserScramCredentials) on a real 2-broker cluster, judged by confluent-kafka's
AdminClient and ours: a user added through one broker logs in on both; a changed
password replaces the old one; deletions, bad credentials and duplicates get Kafka's
error codes; only users with Describe / Alter on the cluster may list / change users."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from clients.admin import Admin
from clients.admin.scram_users import ScramCredentialInfo as OurInfo
from clients.admin.scram_users import UserScramCredentialDeletion as OurDeletion
from clients.admin.scram_users import UserScramCredentialUpsertion as OurUpsertion
from clients.protocol.errors import ErrorCode, MiniKafkaError
from tests.broker.admin.test_acl_apis import PASSWORD, confluent, ours
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.test_client_auth import add_user

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("scram-apis")), 2, {
            "client_auth_required": "true", "authorizer_enabled": "true",
            "super_users": "User:admin",
            # waiting for a changed password fails logins until the brokers re-read the
            # file (within a second): not a guessing attack (test_login_guessing.py)
            "max_failed_logins_per_user": 100_000}) as c:
        for user in ("admin", "dave"):
            added = add_user(c.data_dir, user, PASSWORD)
            assert added.returncode == 0, added.stderr
        wait_until(lambda: _logs_in(c.bootstrap, "admin", PASSWORD), 30, "admin logs in")
        yield c


def _logs_in(bootstrap: str, user: str, password: str) -> bool:
    try:
        with Admin(bootstrap, request_timeout_ms=5_000, security_protocol="SASL_PLAINTEXT",
                   sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                   sasl_plain_password=password) as admin:
            admin.list_topics()
        return True
    except MiniKafkaError:
        return False


def _on_every_broker(cluster: LocalCluster, user: str, password: str) -> bool:
    return all(_logs_in(b, user, password) for b in cluster.bootstrap.split(","))


def test_confluent_adds_a_user_who_logs_in_on_every_broker(cluster: LocalCluster) -> None:
    dave = AdminClient(confluent(cluster, "dave"))
    upsert = UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"erin's password")
    with pytest.raises(KafkaException) as denied:
        dave.alter_user_scram_credentials([upsert])["erin"].result(30)
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    admin = AdminClient(confluent(cluster, "admin"))
    assert admin.alter_user_scram_credentials([upsert])["erin"].result(30) is None
    described = admin.describe_user_scram_credentials(["erin"])["erin"].result(30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    everyone = admin.describe_user_scram_credentials().result(30)
    assert sorted(everyone) == ["admin", "dave", "erin"]
    wait_until(lambda: _on_every_broker(cluster, "erin", "erin's password"), 30,
               "erin logs in on both brokers", 0.1)
    assert not _logs_in(cluster.bootstrap, "erin", "a wrong password")

    missing = UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_512)
    with pytest.raises(KafkaException) as refused:
        admin.alter_user_scram_credentials([missing])["nobody"].result(30)
    assert refused.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    weak = UserScramCredentialUpsertion(
        "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 20_000), b"pw")
    with pytest.raises(KafkaException) as refused:
        admin.alter_user_scram_credentials([weak])["frank"].result(30)
    assert refused.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL


def test_our_admin_changes_a_password_and_deletes_a_user(cluster: LocalCluster) -> None:
    with ours(cluster, "admin") as admin:
        assert admin.alter_user_scram_credentials([
            OurUpsertion("gail", "SCRAM-SHA-256", b"first password"),
            OurUpsertion("hank", "SCRAM-SHA-512", b"hank's password", iterations=4096),
        ]) == {"gail": None, "hank": None}
        wait_until(lambda: _logs_in(cluster.bootstrap, "gail", "first password"), 30,
                   "gail logs in", 0.1)
        admin.alter_user_scram_credentials([
            OurUpsertion("gail", "SCRAM-SHA-256", b"second password")])
        wait_until(lambda: _on_every_broker(cluster, "gail", "second password"), 30,
                   "the new password logs in on both brokers", 0.1)
        assert not _logs_in(cluster.bootstrap, "gail", "first password")

        dup = admin.alter_user_scram_credentials([
            OurDeletion("hank", "SCRAM-SHA-512"),
            OurUpsertion("hank", "SCRAM-SHA-256", b"hank's password")], raise_on_error=False)
        error = dup["hank"]
        assert error is not None and error.code == ErrorCode.DUPLICATE_RESOURCE
        assert admin.describe_user_scram_credentials(["hank"]) == {
            "hank": [OurInfo("SCRAM-SHA-512", 4096)]}  # nothing done for hank
        assert admin.alter_user_scram_credentials([OurDeletion("hank", "SCRAM-SHA-512")]) \
            == {"hank": None}
        gone = admin.describe_user_scram_credentials(["hank"], raise_on_error=False)["hank"]
        assert isinstance(gone, MiniKafkaError) and gone.code == ErrorCode.RESOURCE_NOT_FOUND
        refused = admin.alter_user_scram_credentials(
            [OurUpsertion("broker-0", "SCRAM-SHA-256", b"take over a broker")],
            raise_on_error=False)["broker-0"]
        assert refused is not None and refused.code == ErrorCode.UNACCEPTABLE_CREDENTIAL
    users_file = Path(cluster.data_dir) / "users.scram"
    assert users_file.stat().st_mode & 0o077 == 0
    assert "second password" not in users_file.read_text()
    with ours(cluster, "dave") as dave, pytest.raises(MiniKafkaError) as denied:
        dave.describe_user_scram_credentials()
    assert denied.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
