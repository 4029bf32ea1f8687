"""Sandbox slots (grader.grading.slots.claim): one per live process on the machine, freed when it dies."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.grading.slots import claim as slots
from tests.conftest import ROOT

HOLD = ("import sys; from grader.grading.slots import claim; print(claim.claim_slot(sys.argv[1]), flush=True); "
        "sys.stdin.read()")


@pytest.fixture
def fresh(monkeypatch):
    """This test process holds no slot (claim_slot keeps the first one it got for the process's life)."""
    monkeypatch.setattr(slots, "_slot", None)
    monkeypatch.setattr(slots, "_slot_file", None)
    yield
    if slots._slot_file is not None:
        os.close(slots._slot_file)


def holder(folder):
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return process, int(process.stdout.readline())


def test_two_live_processes_never_share_a_slot_and_a_dead_ones_is_free_again(tmp_path, fresh):
    folder = tmp_path / "slots"
    first, slot_a = holder(folder)
    second, slot_b = holder(folder)
    try:
        assert (slot_a, slot_b) == (0, 1)
        first.kill()
        first.wait()
        assert slots.claim_slot(folder) == 0  # the killed holder's lock went with it
        assert slots.claim_slot(folder) == 0  # once per process
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


@pytest.mark.parametrize("problem", ["world_writable", "not_ours", "a_file"])
def test_a_slot_folder_someone_else_could_write_is_refused(tmp_path, fresh, problem):
    folder = tmp_path / "slots"
    if problem == "a_file":
        folder.write_text("")
    else:
        folder.mkdir()
        os.chmod(folder, 0o777 if problem == "world_writable" else 0o700)
        if problem == "not_ours" and os.getuid() == 0:
            os.chown(folder, 12345, 12345)
        elif problem == "not_ours":
            folder = Path("/")
    with pytest.raises((RuntimeError, FileExistsError), match="private folder|exists"):
        slots.claim_slot(folder)


def test_a_lock_file_planted_as_a_link_is_not_followed(tmp_path, fresh):
    folder = tmp_path / "slots"
    folder.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    (folder / "slot-0.lock").symlink_to(target)
    with pytest.raises(OSError):
        slots.claim_slot(folder)
    assert not target.exists()


def test_the_slot_folder_is_the_same_for_every_run_and_not_in_tmp(monkeypatch, tmp_path):
    import tempfile

    first = slots.slot_folder()
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # another run's environment
    tempfile.tempdir = None
    try:
        assert slots.slot_folder() == first
    finally:
        tempfile.tempdir = None
    assert not str(first).startswith(("/tmp/", "/var/tmp/")), first


def test_a_process_that_claimed_no_slot_gets_a_free_uid_not_slot_0s(tmp_path, fresh, monkeypatch):
    """A sandbox started outside a pool worker (which claims its slot first) must not borrow slot 0's uid:
    another grading run may hold slot 0 and share RLIMIT_NPROC with whatever this sandbox runs."""
    from grader.grading.slots import execution_slot
    folder = tmp_path / "slots"
    monkeypatch.setattr(slots, "slot_folder", lambda: folder)
    first, slot_a = holder(folder)
    try:
        assert slot_a == 0
        assert execution_slot.sandbox_uid() == execution_slot.SANDBOX_UID_BASE + 1
        assert slots.held() == 1 and execution_slot.sandbox_uid() == execution_slot.SANDBOX_UID_BASE + 1
    finally:
        first.kill()
        first.wait()
