"""Who may scrape a broker's metrics port: HTTP Basic credentials against the broker's
SCRAM users, then its ACLs.

:func:`scrape_login` returns the endpoint's ``authenticate`` check
(:data:`broker.metrics.endpoint.Authenticate`) for a broker whose clients must log in
(``client_auth_required``; else the port asks for no login, like the client port):

- the user must be in ``sasl_users_file`` and the password must match its
  SCRAM-SHA-256 credential (:func:`clients.protocol.scram.password_matches`, the check
  SASL/PLAIN uses): else 401;
- with ACLs on (``authorizer_enabled``), the user needs ``Describe`` on ``Cluster``
  ``kafka-cluster`` (super users may anyway): else 403.

Costs: one PBKDF2 of the credential's iterations (4096: a few ms) per scrape.
Not thread-safe: the broker's event loop (it owns the users file and the ACLs).
"""

from __future__ import annotations

from broker.acls import CLUSTER_RESOURCE, Authorizer
from broker.metrics.endpoint import Authenticate
from broker.users import ScramUsers
from clients.protocol.scram import password_matches

MECHANISM = "SCRAM-SHA-256"


def scrape_login(users: ScramUsers, authorizer: Authorizer) -> Authenticate:
    def authenticate(user: str, password: bytes) -> int | None:
        credential = users.credential(MECHANISM, user)
        if credential is None or not password_matches(credential, MECHANISM, password):
            return 401
        if not authorizer.allowed(user, "Describe", "Cluster", CLUSTER_RESOURCE):
            return 403
        return None

    return authenticate
