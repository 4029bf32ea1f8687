"""`make lab`, the learner's one command: JupyterLab comes up on notebooks/ and lists every notebook.

The test runs the real Makefile target (with the environment already in place, as after
`make test` set it up), on a free port with a token and no browser, in a temporary HOME and
Jupyter folders, asks the server's REST API for its contents, and stops the whole process
group. A fresh clone's first `make lab` also builds .venv; that takes minutes and is timed
by hand (see README), not here.
"""
import json
import os
import shutil
import subprocess
import urllib.request
import uuid

import pytest

from tests.conftest import ASSIGNMENTS, ROOT
from tests.course_helpers import free_port, jupyter_folders, stop, wait_for_server

pytestmark = pytest.mark.slow

STARTUP_TIMEOUT_S = 180


def get(url: str):
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.status, reply.headers.get_content_type(), reply.read()


@pytest.fixture(scope="module")
def make_lab(tmp_path_factory):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    base = tmp_path_factory.mktemp("make-lab")
    port, token = free_port(), uuid.uuid4().hex
    lab_args = [f"--port={port}", "--no-browser", "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}", "--LabApp.news_url=None"]
    if os.geteuid() == 0:
        lab_args.append("--allow-root")  # containers and CI run as root; Jupyter refuses without it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "MAKE", "MFLAGS"))}
    env.update(jupyter_folders(base))
    (base / "home").mkdir()
    log_path = base / "make-lab.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(["make", "--no-print-directory", "lab", "LAB_ARGS=" + " ".join(lab_args)],
                                   cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        took = wait_for_server(process, url, token, log_path, STARTUP_TIMEOUT_S, what="make lab", reply_timeout=10)
        print(f"make lab answered after {took:.1f} s")
        yield url, token
    finally:
        stop(process)


def test_make_lab_serves_jupyterlab(make_lab):
    url, token = make_lab
    status, kind, body = get(f"{url}/lab?token={token}")
    assert status == 200 and kind == "text/html"
    assert b"JupyterLab" in body


def test_make_lab_lists_every_notebook(make_lab):
    """The contents API of the server lists exactly the notebooks in notebooks/."""
    url, token = make_lab
    _, _, body = get(f"{url}/api/contents?token={token}")
    listed = {item["name"] for item in json.loads(body)["content"] if item["type"] == "notebook"}
    on_disk = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert listed == on_disk
    for assignment in ASSIGNMENTS:
        assert f"{assignment}.ipynb" in listed
        _, _, body = get(f"{url}/api/contents/{assignment}.ipynb?token={token}&content=1")
        model = json.loads(body)
        assert model["type"] == "notebook" and model["content"]["cells"], f"{assignment}.ipynb did not open"
