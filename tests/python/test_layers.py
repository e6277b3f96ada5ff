"""scripts/check-layers: the server's modules depend on each other one way.

The check passes on the tree as it is, and fails, naming the edge, on copies
of the tree with a cycle or an upward import planted in them.
"""

import pathlib
import shutil
import subprocess
import sys

from conftest import ROOT

CHECK = ROOT / "scripts" / "check-layers"
SRC = ROOT / "server" / "src"


def check(src: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(CHECK), str(src)], capture_output=True, text=True, check=False
    )


def planted(tmp_path: pathlib.Path, edits: dict[str, str]) -> pathlib.Path:
    """A copy of server/src with `text` appended to each named file."""
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy)
    for rel, text in edits.items():
        with open(copy / rel, "a", encoding="utf-8") as f:
            f.write("\n" + text + "\n")
    return copy


def test_the_tree_depends_one_way():
    result = check(SRC)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "one way" in result.stdout


def test_a_cycle_inside_a_room_fails(tmp_path):
    # rpc::methods already uses rpc::wire; make wire use methods back.
    src = planted(tmp_path, {"rpc/wire.rs": "fn planted() -> u64 { super::methods::MAX_WAIT_MS }"})
    result = check(src)
    assert result.returncode == 1
    assert "module cycle" in result.stdout
    assert "rpc::wire -> rpc::methods" in result.stdout


def test_a_lower_room_importing_a_higher_one_fails(tmp_path):
    src = planted(tmp_path, {"stream/id.rs": "use crate::rpc::RpcError;"})
    result = check(src)
    assert result.returncode == 1
    assert "`stream::id` uses `rpc`, a layer above" in result.stdout


def test_a_cycle_between_rooms_through_a_reexport_fails(tmp_path):
    # `engine::ValidRunRequest` is re-exported from `backend`: the edge
    # lands there.
    src = planted(
        tmp_path, {"vocab/cancel.rs": "fn planted(_: crate::engine::ValidRunRequest) {}"}
    )
    result = check(src)
    assert result.returncode == 1
    assert "`vocab::cancel` uses `backend`, a layer above" in result.stdout


def test_peers_may_not_use_each_other(tmp_path):
    src = planted(tmp_path, {"stream/id.rs": "use crate::backend::Utf8Assembler;"})
    result = check(src)
    assert result.returncode == 1
    assert "`stream::id` uses `backend`, a peer" in result.stdout


def test_test_modules_are_not_counted(tmp_path):
    src = planted(
        tmp_path,
        {"stream/id.rs": "#[cfg(test)]\nmod planted {\n    use crate::rpc::RpcError;\n}"},
    )
    assert check(src).returncode == 0


def test_an_adapter_or_rpc_naming_a_room_behind_the_service_fails(tmp_path):
    src = planted(
        tmp_path,
        {
            "transport/api/openai/wire.rs": "use crate::engine::Engine;",
            "rpc/wire.rs": "fn planted() -> usize { crate::model::image::IMAGE_TAG.len() }",
        },
    )
    result = check(src)
    assert result.returncode == 1
    assert "`transport::api::openai::wire` names `engine::Engine`" in result.stdout
    assert "`rpc::wire` names `model::image::IMAGE_TAG`" in result.stdout
    # What the service offers is the door.
    ok = planted(
        tmp_path / "ok", {"transport/api/openai/wire.rs": "use crate::service::IMAGE_TAG as _T;"}
    )
    assert check(ok).returncode == 0
