"""The course's JupyterLab settings: no news pop-up, installed where JupyterLab reads an environment's defaults."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

OVERRIDES = ROOT / "tools" / "jupyterlab" / "overrides.json"


def test_the_news_pop_up_is_off_in_a_value_the_schema_accepts():
    settings = json.loads(OVERRIDES.read_text())
    notification = settings["@jupyterlab/apputils-extension:notification"]
    schema_path = (ROOT / ".venv" / "share" / "jupyter" / "lab" / "schemas" / "@jupyterlab" / "apputils-extension"
                   / "notification.json")
    if not schema_path.exists():  # JupyterLab's schemas live in the environment's prefix
        schema_path = (__import__("pathlib").Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas" / "@jupyterlab"
                       / "apputils-extension" / "notification.json")
    schema = json.loads(schema_path.read_text())["properties"]
    assert notification["fetchNews"] == "false"
    assert {"const": "false", "title": "Never"} in schema["fetchNews"]["oneOf"]
    assert notification["checkForUpdates"] is False and schema["checkForUpdates"]["type"] == "boolean"


def test_make_install_and_make_lab_put_it_where_jupyterlab_reads_overrides():
    for target in ("install", "lab"):
        planned = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True).stdout
        assert "cp tools/jupyterlab/overrides.json .venv/share/jupyter/lab/settings/overrides.json" in planned, target
    from jupyterlab.commands import get_app_dir
    from jupyterlab_server.config import get_page_config  # noqa: F401 - JupyterLab reads <prefix>/.../settings

    assert get_app_dir().endswith("share/jupyter/lab")
