"""A data directory names the cluster and node it belongs to; another one's is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.protocol.errors import ErrorCode
from storage.meta_properties import (
    META_PROPERTIES,
    DataDirIdentityError,
    InconsistentClusterIdError,
    check_data_dir_identity,
    read_meta_properties,
)


def test_a_new_directory_is_labelled_and_then_accepted_again(tmp_path: Path) -> None:
    broker, controller = tmp_path / "broker-3", tmp_path / "controller"
    check_data_dir_identity(broker, "blue", 3)
    check_data_dir_identity(controller, "blue")
    assert read_meta_properties(broker) == {"version": "1", "cluster.id": "blue", "node.id": "3"}
    assert read_meta_properties(controller) == {"version": "1", "cluster.id": "blue"}
    before = (broker / META_PROPERTIES).read_bytes()
    check_data_dir_identity(broker, "blue", 3)
    assert (broker / META_PROPERTIES).read_bytes() == before
    assert read_meta_properties(tmp_path / "never-started") is None


def test_another_clusters_directory_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    check_data_dir_identity(tmp_path, "blue", 0)
    before = (tmp_path / META_PROPERTIES).read_bytes()
    with pytest.raises(InconsistentClusterIdError) as refused:
        check_data_dir_identity(tmp_path, "green", 0)
    assert refused.value.code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert "'blue', not 'green'" in refused.value.message
    assert (tmp_path / META_PROPERTIES).read_bytes() == before


@pytest.mark.parametrize(("labelled", "starting"), [(0, 1), (0, None), (None, 2)])
def test_another_nodes_directory_is_refused(
        tmp_path: Path, labelled: int | None, starting: int | None) -> None:
    check_data_dir_identity(tmp_path, "blue", labelled)
    with pytest.raises(DataDirIdentityError, match="belongs to") as refused:
        check_data_dir_identity(tmp_path, "blue", starting)
    assert not isinstance(refused.value, InconsistentClusterIdError)


@pytest.mark.parametrize("content", [
    b"", b"version=1\n", b"cluster.id=blue\n", b"version=2\ncluster.id=blue\n",
    b"version=1\ncluster.id=blue\ngarbage\n", b"\xff\xfe\x00", b"#" * 5000,
])
def test_a_damaged_file_is_refused_never_rewritten(tmp_path: Path, content: bytes) -> None:
    (tmp_path / META_PROPERTIES).write_bytes(content)
    with pytest.raises(DataDirIdentityError, match="damaged"):
        check_data_dir_identity(tmp_path, "blue", 0)
    assert (tmp_path / META_PROPERTIES).read_bytes() == content
