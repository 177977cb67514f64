"""A voter's directory identity: a new directory nobody formatted is a lost disk
(an observer until caught up); a formatted one, or one holding quorum data, votes."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.controller.quorum.voter_directory import (
    VOTER_DIRECTORY_FILE,
    format_new_quorum,
    is_new_voter_directory,
    open_voter_directory,
    record_caught_up,
)
from storage.meta_properties import DataDirIdentityError


def test_an_unformatted_new_directory_is_an_observer_until_recorded_caught_up(
        tmp_path: Path) -> None:
    first = open_voter_directory(tmp_path, has_quorum_data=False)
    assert first.observer and len(bytes.fromhex(first.directory_id)) == 16
    assert open_voter_directory(tmp_path, has_quorum_data=True) == first  # the file rules
    caught_up = record_caught_up(tmp_path, first)
    assert open_voter_directory(tmp_path, has_quorum_data=False) == caught_up
    assert not caught_up.observer and caught_up.directory_id == first.directory_id


def test_a_directory_with_quorum_data_from_before_the_file_votes(tmp_path: Path) -> None:
    assert not open_voter_directory(tmp_path, has_quorum_data=True).observer


def test_a_quorum_is_formatted_only_when_every_voter_directory_is_new(tmp_path: Path) -> None:
    dirs = [tmp_path / str(i) for i in range(3)]
    assert format_new_quorum(dirs)
    ids = {open_voter_directory(d, False).directory_id for d in dirs}
    assert len(ids) == 3 and not any(open_voter_directory(d, False).observer for d in dirs)
    (dirs[1] / VOTER_DIRECTORY_FILE).unlink()  # one voter's disk lost
    assert is_new_voter_directory(dirs[1]) and not format_new_quorum(dirs)
    assert open_voter_directory(dirs[1], False).observer
    (dirs[2] / VOTER_DIRECTORY_FILE).unlink()
    (dirs[2] / "quorum-state").write_text("{}")
    assert not is_new_voter_directory(dirs[2])


def test_a_damaged_file_is_refused_never_rewritten(tmp_path: Path) -> None:
    (tmp_path / VOTER_DIRECTORY_FILE).write_text("version=1\nstate=maybe\n")
    with pytest.raises(DataDirIdentityError, match="damaged"):
        open_voter_directory(tmp_path, has_quorum_data=True)
    assert (tmp_path / VOTER_DIRECTORY_FILE).read_text() == "version=1\nstate=maybe\n"
