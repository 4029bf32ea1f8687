"""Machinery for tests/e2e/test_classroom.py: throw-away Linux users, a JupyterHub, commands run as a user.

Everything here acts on the machine as root, and only on what it created: users whose names
start with a random prefix, processes of their uids, files under the classroom's temporary
folder and the users' homes. Nothing is written to /etc (apart from the user database that
useradd/userdel keep) or /srv.

Python for other users. The course's interpreter may live in a folder other users cannot
cross (pyenv under /root, mode 700). The hub, and so every single-user server it spawns, and
each command run as a user, run in a private mount namespace where each such folder is an
empty tmpfs with only the installation (and the checkout, if it is there too) bound back,
read-only, at its own path; nothing on disk changes and no other process sees it.
"""
from __future__ import annotations

import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from grader.grading.sandbox.rootfs import blocking_ancestor
from tests.conftest import ROOT
from tests.course_helpers import free_port

PROXY = ROOT / "build" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def poll(condition, seconds: float, every: float = 0.25):
    """condition()'s first truthy value within ``seconds``, else None (no fixed sleeps elsewhere)."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


# -- reaching the interpreter ----------------------------------------------------------------
def namespace_setup(staging: Path) -> str:
    """Shell commands (ending in '&& ' or empty) that, run as root in a fresh private mount
    namespace, make the interpreter, the venv and the checkout reachable by every user."""
    needed = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)} | {str(ROOT.resolve())})
    outermost = [p for p in needed if not any(p != q and p.startswith(q + "/") for q in needed)]
    covered: dict[str, list[str]] = {}
    for path in outermost:
        blocked = blocking_ancestor(path)
        if blocked:
            covered.setdefault(blocked, []).append(path)
    commands = []
    for i, (folder, paths) in enumerate(sorted(covered.items())):
        stages = []
        for j, path in enumerate(paths):
            stage = staging / f"{i}-{j}"
            stage.mkdir(parents=True, exist_ok=True)
            stages.append((path, stage))
            commands.append(f"mount --bind {shlex.quote(path)} {shlex.quote(str(stage))}")
        commands.append(f"mount -t tmpfs -o mode=755,size=1m tmpfs {shlex.quote(folder)}")
        for path, stage in stages:
            commands.append(f"mkdir -p {shlex.quote(path)}")
            commands.append(f"mount -o bind,ro {shlex.quote(str(stage))} {shlex.quote(path)}")
    return "".join(c + " && " for c in commands)


def in_namespace(setup: str, shell_command: str) -> list[str]:
    """argv running ``shell_command`` (after ``setup``) in a private mount namespace."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", setup + shell_command]


# -- users -----------------------------------------------------------------------------------
def create_user(name: str, password: str) -> pwd.struct_passwd:
    """A login user with a home of its own (mode 0700) and a password."""
    subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", name], check=True,
                   capture_output=True)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    os.chmod(entry.pw_dir, 0o700)
    return entry


def pids_of(uid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:  # real uid
                            found.append(int(entry))
                        break
        except (OSError, ValueError):
            continue
    return found


def kill_processes(uids: list[int]) -> bool:
    """SIGKILL every process of these (throw-away) uids, by pid; True once none is left."""
    for _ in range(3):
        for uid in uids:
            for pid in pids_of(uid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if poll(lambda: not any(pids_of(uid) for uid in uids), 5, 0.05):
            return True
    return False


def remove_user(name: str) -> str | None:
    """Delete the user, its group and its home (its processes must be gone); a problem, or None."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    done = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)
    if os.path.isdir(entry.pw_dir) and entry.pw_dir.startswith("/home/"):
        shutil.rmtree(entry.pw_dir, ignore_errors=True)
    if done.returncode not in (0, 12):  # 12: the home could not be removed (done above)
        return f"userdel {name}: exit {done.returncode}: {done.stderr.strip()}"
    return None


def user_command(setup: str, user: pwd.struct_passwd, argv: list[str], cwd: str, env: dict[str, str]) -> list[str]:
    """argv running ``argv`` as ``user`` (runuser, a clean login-like environment) where Python is reachable."""
    environment = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name, "SHELL": user.pw_shell,
                   "PATH": f"{Path(sys.executable).parent}:{SYSTEM_PATH}", "LANG": "C.UTF-8", **env}
    command = (f"cd {shlex.quote(cwd)} && exec runuser -u {shlex.quote(user.pw_name)} -- env -i "
               + " ".join(shlex.quote(f"{k}={v}") for k, v in environment.items()) + " "
               + " ".join(shlex.quote(a) for a in argv))
    return in_namespace(setup, command)


def start_as(setup: str, user: pwd.struct_passwd, argv: list[str], cwd: str, env: dict[str, str]) -> subprocess.Popen:
    """Start ``argv`` as ``user``; ``finish`` collects it."""
    process = subprocess.Popen(user_command(setup, user, argv, cwd, env), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    process.argv = argv
    return process


def finish(process: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        stderr += f"\n(killed after {timeout:.0f} s)"
    return subprocess.CompletedProcess(process.argv, process.returncode, stdout, stderr)


def write_as(user: pwd.struct_passwd, path: Path, data: bytes) -> None:
    """Write a file as the user would (their uid, through their own permissions)."""
    subprocess.run(["runuser", "-u", user.pw_name, "--", "tee", str(path)], input=data, stdout=subprocess.DEVNULL,
                   check=True)


# -- the hub ---------------------------------------------------------------------------------
HUB_CONFIG = """\
c = get_config()  # noqa: F821 - injected by traitlets
c.JupyterHub.bind_url = {bind_url!r}
c.JupyterHub.hub_bind_url = {hub_bind_url!r}
c.JupyterHub.db_url = {db_url!r}
c.JupyterHub.cookie_secret_file = {cookie_secret_file!r}
c.JupyterHub.cleanup_servers = False  # the test ends the users' processes itself
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.ConfigurableHTTPProxy.api_url = {proxy_api_url!r}
c.ConfigurableHTTPProxy.pid_file = {proxy_pid_file!r}
c.ConfigurableHTTPProxy.auth_token = {proxy_token!r}

# Real users, their own passwords (PAM).
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = {users!r}
c.PAMAuthenticator.open_sessions = False

# Each user's JupyterLab is a process of their own uid, in their home.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.default_url = "/lab"
c.Spawner.args = ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
# The hub-wide nbgrader configuration (the exchange), as /etc/jupyter would hold it.
c.Spawner.environment = {{"JUPYTER_CONFIG_PATH": {config_path!r}}}
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
"""


class Hub:
    """JupyterHub (and its proxy) as root in the private mount namespace; URL in ``url``."""

    def __init__(self, folder: Path, setup: str, users: list[str], config_path: Path):
        self.folder = folder
        folder.mkdir(mode=0o700)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = folder / "jupyterhub.log"
        (folder / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
            bind_url=self.url + "/", hub_bind_url=f"http://127.0.0.1:{free_port()}",
            db_url=f"sqlite:///{folder / 'jupyterhub.sqlite'}",
            cookie_secret_file=str(folder / "jupyterhub_cookie_secret"), proxy=str(PROXY),
            proxy_api_url=f"http://127.0.0.1:{free_port()}", proxy_pid_file=str(folder / "proxy.pid"),
            proxy_token=os.urandom(16).hex(), users=set(users),
            singleuser=str(Path(sys.executable).parent / "jupyterhub-singleuser"), config_path=str(config_path)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_")) and k != "PYTHONPATH"}
        env.update(PATH=f"{Path(sys.executable).parent}:{SYSTEM_PATH}", HOME=str(folder))
        command = f"exec {shlex.quote(sys.executable)} -m jupyterhub -f jupyterhub_config.py"
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(in_namespace(setup, command), cwd=folder, env=env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, seconds: float = 120) -> None:
        def answers():
            assert self.process.poll() is None, f"JupyterHub exited ({self.process.returncode}):\n{self.log_tail()}"
            try:
                with urllib.request.urlopen(f"{self.url}/hub/api/", timeout=5) as reply:
                    return reply.status == 200
            except (OSError, urllib.error.URLError):
                return False

        assert poll(answers, seconds, 0.3), f"JupyterHub did not answer in {seconds:.0f} s:\n{self.log_tail()}"

    def stop(self) -> None:
        """SIGTERM: the hub stops the proxy (not the single-user servers); SIGKILL if it lingers."""
        if self.process.poll() is not None:
            return
        try:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        finally:
            try:  # the proxy runs in a session of its own: a hub killed hard leaves it running
                pid = int((self.folder / "proxy.pid").read_text().strip())
                if Path(f"/proc/{pid}/cmdline").read_bytes().find(b"configurable-http-proxy") >= 0:
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass
