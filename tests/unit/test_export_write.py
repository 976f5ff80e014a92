"""``export --write-to`` (issue 16, "Concurrency and files"): it replaces only a file autotune
wrote (its marker line) unless told to, and a file it writes survives a crash whole: written,
fsynced, renamed, the directory fsynced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from autotune.cli import build_parser
from autotune.errors import AutotuneError
from autotune.report.export import write_to

ENV = "# autotune recommendation for api (study api): c1, verdict adopt\nGOMAXPROCS=2\n"
ENV2 = "# autotune recommendation for api (study api): c2, verdict adopt\nGOMAXPROCS=4\n"
JSON = json.dumps({"experiment": "api", "env": {"GOMAXPROCS": "2"}, "unset": [],
                   "deployment": None, "forced": False}, indent=2) + "\n"


@pytest.mark.parametrize("fmt,name,text", [("env", "api.env", ENV),
                                           ("kustomize", "api-patch.yaml", ENV),
                                           ("json", "api.json", JSON)])
def test_a_file_a_person_wrote_is_not_replaced(tmp_path: Path, fmt: str, name: str,
                                               text: str) -> None:
    mine = tmp_path / name
    mine.write_text("# tuned by hand, do not touch\nGOMAXPROCS=3\n")
    with pytest.raises(AutotuneError, match="not written by autotune") as refused:
        write_to(tmp_path, "api", fmt, text)
    assert refused.value.exit_code == 1
    assert "--overwrite" in str(refused.value)
    assert mine.read_text() == "# tuned by hand, do not touch\nGOMAXPROCS=3\n"
    # told to, it does
    path, written = write_to(tmp_path, "api", fmt, text, overwrite=True)
    assert (path, written) == (mine, True)
    assert "GOMAXPROCS" in mine.read_text() and "by hand" not in mine.read_text()


def test_its_own_file_is_replaced_when_the_variables_change(tmp_path: Path) -> None:
    path, written = write_to(tmp_path, "api", "env", ENV)
    assert written
    assert write_to(tmp_path, "api", "env", ENV) == (path, False)
    assert write_to(tmp_path, "api", "env", ENV2) == (path, True)
    assert "GOMAXPROCS=4" in path.read_text()
    path, written = write_to(tmp_path, "api", "json", JSON)
    assert written and json.loads(path.read_text())["env"] == {"GOMAXPROCS": "2"}
    changed = JSON.replace('"2"', '"4"')
    assert write_to(tmp_path, "api", "json", changed) == (path, True)


def test_a_file_written_before_the_marker_existed_is_still_autotunes(tmp_path: Path) -> None:
    """Promotion directories filled by an earlier autotune keep working after an upgrade."""
    (tmp_path / "api.env").write_text(ENV)  # an old export: the header, no marker
    assert write_to(tmp_path, "api", "env", ENV2)[1]


def test_the_file_is_synced_before_the_rename_and_the_directory_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("replace", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path, written = write_to(tmp_path, "api", "env", ENV)
    assert written
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync", "replace", "fsync"], events
    tmp_file, renamed, directory = (what for _, what in events)
    assert Path(tmp_file).parent == tmp_path and Path(tmp_file) != path  # the new file's data
    assert renamed == str(path)
    assert directory == str(tmp_path)  # the rename itself
    assert not [p for p in tmp_path.iterdir() if p != path], "a temporary file was left"


def test_the_cli_takes_overwrite_with_write_to() -> None:
    args = build_parser().parse_args(["export", "x.yaml", "--format", "env", "--write-to", "d",
                                      "--overwrite"])
    assert args.overwrite is True


def test_a_write_to_that_is_a_file_or_unwritable_is_an_error_not_a_bug(tmp_path: Path) -> None:
    # Review finding: `--write-to FILE` (a regular file) failed with FileExistsError: exit 3.
    afile = tmp_path / "promote"
    afile.write_text("mine\n")
    with pytest.raises(AutotuneError, match="is a file, not a directory") as refused:
        write_to(afile, "api", "env", ENV)
    assert refused.value.exit_code == 1 and afile.read_text() == "mine\n"
    # a directory that cannot be made (a file in its path): the OS's words, exit 1
    with pytest.raises(AutotuneError, match=r"cannot write .*promote/sub/api\.env") as refused:
        write_to(afile / "sub", "api", "env", ENV)
    assert refused.value.exit_code == 1 and afile.read_text() == "mine\n"


def test_a_link_planted_in_the_promote_directory_is_not_followed(tmp_path: Path) -> None:
    # Review finding: the temporary file's name was .<file>.<pid>.tmp, opened with O_TRUNC and
    # following links; as the CronJob pod's PID 1 its name was known, so a writer of the shared
    # promote directory (a git-sync sidecar) could make autotune overwrite any file it may write.
    victim = tmp_path / "study.db"
    victim.write_text("the study")
    promote = tmp_path / "promote"
    promote.mkdir()
    (promote / f".api.env.{os.getpid()}.tmp").symlink_to(victim)
    path, written = write_to(promote, "api", "env", ENV)
    assert written and "GOMAXPROCS=2" in path.read_text()
    assert victim.read_text() == "the study"
    assert not path.is_symlink()
