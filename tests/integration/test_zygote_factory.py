"""One warm zygote factory per grader process: each grading slot gets a fork of it, not an import of torch.

A factory's zygote must behave like a zygote of its own (sandboxes start, its sandboxes die with its
client), the factory must serve only its own user through a private folder, and when the factory is
gone a slot still gets a zygote (it starts one itself).
"""
from __future__ import annotations

import os
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grader.grading.sandbox import client, zygote_client
from tests.integration.test_isolation import run_json

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]
SLOT_UID = 61991  # out of the way of the other tests' sandboxes
IS_ROOT = os.geteuid() == 0


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def gone(pid: int, seconds: float = 10.0) -> bool:
    """The process has exited (a zombie counts: it runs nothing)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def factory():
    made = zygote_client.ZygoteFactory()
    yield made
    made.close()


@pytest.fixture(scope="module")
def scratch():
    folder = tempfile.mkdtemp(prefix="lncourse-test-factory-")
    os.chmod(folder, 0o711)
    yield Path(folder)
    leftovers = os.listdir(folder)
    os.rmdir(folder) if not leftovers else None
    assert not leftovers, f"sandboxes left their folders behind: {leftovers}"


def sandbox(zygote: zygote_client.Zygote, scratch: Path) -> client.Sandbox:
    return client.Sandbox(mode="auto", uid=SLOT_UID, scratch=scratch, zygote=zygote)


def test_each_client_gets_a_zygote_of_its_own_forked_from_the_factory(factory, scratch):
    info = os.stat(factory.folder)
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
    first, second = zygote_client.Zygote(factory=factory.path), zygote_client.Zygote(factory=factory.path)
    try:
        with sandbox(first, scratch) as a, sandbox(second, scratch) as b:
            assert run_json(a, "print(6 * 7)") == 42
            assert run_json(b, "import torch; print(int(torch.ones(3).sum()))") == 3
            zygotes = {parent_of(a.pid), parent_of(b.pid)}
            assert len(zygotes) == 2 and None not in zygotes, "two clients, two zygotes"
            assert {parent_of(z) for z in zygotes} == {factory.process.pid}
    finally:
        first.close()
        second.close()


def test_a_closed_client_takes_its_zygote_and_sandboxes_with_it(factory, scratch):
    zygote = zygote_client.Zygote(factory=factory.path)
    box = sandbox(zygote, scratch)
    sandbox_pid, zygote_pid = box.pid, parent_of(box.pid)
    zygote.close()  # as when a grading slot exits with a notebook still running
    assert gone(sandbox_pid) and gone(zygote_pid)
    assert not zygote.alive()
    box.close()  # the grader's own teardown still ends without raising, and removes the folder
    assert not box.workdir.exists()
    with sandbox(zygote_client.Zygote(factory=factory.path), scratch) as again:  # the factory serves on
        assert run_json(again, "print(1 + 1)") == 2
        again.zygote.close()


def test_the_factory_exits_with_its_owner_and_leaves_no_socket(scratch):
    made = zygote_client.ZygoteFactory()
    zygote = zygote_client.Zygote(factory=made.path)
    made.control.close()  # what the kernel does when the grader dies, however it dies
    assert gone(made.process.pid)
    assert not os.path.exists(made.folder), "the factory removes its socket and folder"
    with sandbox(zygote, scratch) as box:  # a zygote made before serves its client to the end
        assert run_json(box, "print(3)") == 3
    zygote.close()
    made.close()


@pytest.mark.skipif(not IS_ROOT, reason="needs another uid to connect as")
def test_the_factory_serves_no_other_user(factory):
    os.chmod(factory.folder, 0o711)  # even where the folder would let them reach the socket
    os.chmod(factory.path, 0o777)
    child = os.fork()
    if child == 0:
        code = 3
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                zygote_client.Zygote(factory=factory.path)
                code = 1  # served
            except client.SandboxError:
                code = 0  # connected, then refused
            except OSError:
                code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_slot_starts_its_own_zygote_when_the_factory_is_gone(factory, monkeypatch, scratch):
    path = factory.path
    factory.close()
    monkeypatch.setattr(zygote_client, "_default_zygote", None)
    monkeypatch.setattr(zygote_client, "_factory_path", path)
    zygote = zygote_client.default_zygote()
    try:
        assert zygote.process is not None and zygote.alive()
        with sandbox(zygote, scratch) as box:
            assert run_json(box, "print(5)") == 5
    finally:
        zygote.close()


def test_a_factory_that_accepts_but_never_answers_costs_a_slot_seconds_not_the_run(monkeypatch, scratch, tmp_path):
    """A stuck factory (another version's, a stopped process) must not hang the slot: it starts its own zygote."""
    import socket

    path = str(tmp_path / "socket")
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(path)
    silent.listen()
    monkeypatch.setattr(zygote_client, "FACTORY_READY_SECONDS", 0.5)
    monkeypatch.setattr(zygote_client, "_default_zygote", None)
    monkeypatch.setattr(zygote_client, "_factory_path", path)
    try:
        stuck = zygote_client.Zygote(wait=False, factory=path)
        with pytest.raises(client.SandboxError, match="did not answer"):
            stuck.wait_ready()
        stuck.close()
        assert zygote_client._factory_path is None, "the slot keeps asking a factory that does not answer"
        monkeypatch.setattr(zygote_client, "_factory_path", path)
        started = time.monotonic()
        zygote = zygote_client.default_zygote()  # what a slot's initializer calls: its own zygote, not an error
        assert time.monotonic() - started < 120
        try:
            assert zygote.process is not None
            with sandbox(zygote, scratch) as box:
                assert run_json(box, "print(6)") == 6
        finally:
            zygote.close()
    finally:
        silent.close()
