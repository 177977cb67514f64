"""controller_quorum_voters (Kafka's ``id@host:port,...``) and the controller's flags:
one voter, itself, is today's single controller; several are refused until the process
runs the quorum."""

from __future__ import annotations

import pytest

from broker.controller.config import ControllerConfig
from broker.controller.quorum.voters import voter_map
from broker.controller.server import build_parser
from clients.protocol.errors import InvalidConfigError


def test_kafkas_form_parses() -> None:
    assert voter_map("1@127.0.0.1:9093, 2@host-b:9094,3@[::1]:9095") == {
        1: ("127.0.0.1", 9093), 2: ("host-b", 9094), 3: ("::1", 9095)}
    assert voter_map("") == {}


@pytest.mark.parametrize("text", ["1@127.0.0.1", "x@h:1", "1@:9093", "-1@h:1", "1@h:0",
                                  "1@h:70000", "1@h:1,1@g:2", "1h:1"])
def test_malformed_voters_are_refused(text: str) -> None:
    with pytest.raises(InvalidConfigError, match="controller_quorum_voters"):
        voter_map(text)


def test_one_voter_itself_is_the_single_controller() -> None:
    args = build_parser().parse_args(["--node-id", "3000",
                                      "--controller-quorum-voters", "3000@127.0.0.1:9093"])
    config = ControllerConfig.load(None, {"node_id": args.node_id,
                                          "controller_quorum_voters":
                                          args.controller_quorum_voters})
    assert (config.node_id, voter_map(config.controller_quorum_voters)) == (
        3000, {3000: ("127.0.0.1", 9093)})


def test_a_node_outside_the_voters_is_refused_and_several_voters_are_a_quorum() -> None:
    with pytest.raises(InvalidConfigError, match="not one of"):
        ControllerConfig.load(None, {"node_id": 2,
                                     "controller_quorum_voters": "1@127.0.0.1:9093"})
    config = ControllerConfig.load(None, {"node_id": 1, "controller_quorum_voters":
                                          "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"})
    assert sorted(voter_map(config.controller_quorum_voters)) == [1, 2, 3]
