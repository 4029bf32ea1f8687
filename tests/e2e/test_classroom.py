"""A real classroom on this machine: JupyterHub, Linux users, nbgrader's exchange, a non-root instructor.

JupyterHub (PAM logins, the local process spawner, configurable-http-proxy from
`tools/ensure-proxy`) on free loopback ports; one instructor and four students, real Linux
users with random names, homes of mode 0700, removed afterwards with their homes. The course
is a built copy owned by the instructor in their home; the exchange and the hub-wide nbgrader
configuration live in a temporary folder (``JUPYTER_CONFIG_PATH`` in the spawner's
environment, as ``/etc/jupyter`` would be on a real hub); nothing is written to /etc or /srv.

What a person clicks is clicked in Chromium: three students log in on the hub's page, fetch
the assignment from nbgrader's Assignments panel, work (the notebook file is written as the
student: the course's solved edition, the first half of the exercises, nothing) and submit
from the panel; later each fetches their feedback there. A fourth student uses the command
line and submits cells that look for the exchange, other homes, the course and the network,
and hide script for the formgrader. The instructor, never root (runuser), builds the copy,
runs `nbgrader release_assignment`, `nbgrader collect`, `python -m grader grade` and
`nbgrader release_feedback`, and reads the grades in the formgrader (in the browser).
docs/instructors.md's dry run is made of the commands this test runs.

Screenshots and logs land in test-artifacts/classroom/. The time of each step is printed
(pytest -s).
"""
from __future__ import annotations

import csv
import html
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from tests import course_helpers
from tests.conftest import ROOT
from tests.course_helpers import CHROMIUM, launch_chromium, splice
from tests.e2e.test_exchange import exercise_points

pytestmark = pytest.mark.slow

ASSIGNMENT = "03_backward"
COURSE_ID = "layernorm-rmsnorm"  # c.CourseDirectory.course_id in nbgrader_config.py
STUDENTS = {"s1": "full", "s2": "half", "s3": "nothing"}  # in the browser
HOSTILE = "s4"  # on the command line
VIEWPORT = {"width": 1440, "height": 900}
SCREENSHOTS = ROOT / "test-artifacts" / "classroom"
PROBE_MARK = "CLASSROOM-PROBE "
# JupyterLab settings each user's home starts with (as /etc/skel would give them): no news
# or update checks (they would try to reach the network and cover the panel with a toast).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
}


def unavailable(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"the classroom test cannot run: {reason}")
    pytest.skip(reason)


class Steps:
    """Wall time of each step, printed as a table."""

    def __init__(self):
        self.times: list[tuple[str, float]] = []

    @contextmanager
    def __call__(self, name: str):
        began = time.monotonic()
        try:
            yield
        finally:
            self.times.append((name, time.monotonic() - began))
            print(f"[classroom] {name}: {self.times[-1][1]:.1f} s", flush=True)

    def table(self) -> str:
        width = max((len(n) for n, _ in self.times), default=10)
        lines = [f"  {n:<{width}}  {s:6.1f} s" for n, s in self.times]
        lines.append(f"  {'total':<{width}}  {sum(s for _, s in self.times):6.1f} s")
        return "\n".join(lines)


def page_text(text: str) -> str:
    """The text a reader sees in an HTML page (tags dropped, entities decoded)."""
    text = re.sub(r"<(script|style)\b.*?</\1>", "", text, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def js_number(x: float) -> str:
    """A score as the formgrader prints it (JavaScript's number to string, 2 decimals)."""
    x = round(x, 2)
    return str(int(x)) if x == int(x) else repr(x)


# -- the probe a hostile student submits -----------------------------------------------------
PROBE = '''
import json, os, socket
seen = {}
for path in %(paths)r:
    try:
        if os.path.isdir(path):
            seen[path] = "VISIBLE: " + repr(sorted(os.listdir(path))[:8])
        else:
            with open(path, "rb") as f:
                seen[path] = "VISIBLE: " + repr(f.read(24))
    except OSError as error:
        seen[path] = "hidden: " + type(error).__name__
try:
    home_listing = sorted(os.listdir("/home"))
except OSError as error:
    home_listing = type(error).__name__
network = {}
for host, port in %(targets)r:
    try:
        socket.create_connection((host, port), timeout=5).close()
        network[f"{host}:{port}"] = "CONNECTED"
    except OSError as error:
        network[f"{host}:{port}"] = "failed: " + type(error).__name__
print(%(mark)r + json.dumps({"paths": seen, "home": home_listing, "network": network}))
'''


# What a student sees of the others from their own terminal (outside any sandbox).
LOOK_AROUND = """
import json, os, sys
seen = {}
for path in json.loads(sys.argv[1]):
    try:
        seen[path] = "VISIBLE: " + repr(sorted(os.listdir(path))[:8])
    except OSError as error:
        seen[path] = "hidden: " + type(error).__name__
print(json.dumps(seen))
"""


# Script a student hides in a markdown cell and in an output: it must not run in the browser of
# the instructor who opens the submission in the formgrader (it would act as the instructor).
XSS_TEXT = "LNC-XSS-PROBE"
XSS_MARKDOWN = (f"{XSS_TEXT}: HTML in a student's markdown.\n\n"
                "<img src=\"x-lnc-md\" onerror=\"window.__lncXss = 'markdown'; document.title = 'PWNED'\">\n\n"
                "<script>window.__lncXss = 'script'; document.title = 'PWNED';</script>\n")
XSS_OUTPUT = ("from IPython.display import HTML, display\n"
              "display(HTML('<img src=\"x-lnc-out\" onerror=\"window.__lncXss = &quot;output&quot;; "
              "document.title = &quot;PWNED&quot;\">'))")


def read_probe(text: str) -> dict | None:
    """The report the probe printed (the marker followed by JSON; the cell's source has it too)."""
    for match in re.finditer(re.escape(PROBE_MARK) + r"(?=\{)", text):
        try:
            return json.JSONDecoder().raw_decode(text, match.end())[0]
        except ValueError:
            continue
    return None


# -- the browser -----------------------------------------------------------------------------
def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def start_login(context, hub_url: str, user: str, password: str, next_path: str = ""):
    """The hub's login page, filled in and sent; returns the page (the server starts spawning)."""
    page = context.new_page()
    page.goto(f"{hub_url}/hub/login" + (f"?next={urllib.parse.quote(next_path, safe='')}" if next_path else ""))
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")
    return page


def wait_for_lab(page, user: str) -> None:
    page.wait_for_url(re.compile(rf"/user/{re.escape(user)}/lab"), timeout=240_000)
    page.locator('#jp-menu-panel .lm-MenuBar-itemLabel:text-is("Nbgrader")').wait_for(timeout=120_000)


def nbgrader_menu(page, command: str) -> None:
    page.locator('#jp-menu-panel .lm-MenuBar-itemLabel:text-is("Nbgrader")').click()
    page.locator(f'.lm-Menu li[data-command="{command}"]').click()


def assignment_row(page, status: str):
    """The row of ASSIGNMENT in the Assignments panel's list ``status`` (released, fetched, submitted)."""
    return page.locator(f"#{status}_assignments_list > .list_item").filter(
        has=page.locator(".item_name", has_text=ASSIGNMENT))


def fetch_in_browser(page) -> None:
    nbgrader_menu(page, "nbgrader:open-assignment-list")
    row = assignment_row(page, "released")
    row.wait_for(timeout=60_000)
    row.locator(".item_status button").click()
    assignment_row(page, "fetched").wait_for(timeout=60_000)


def submit_in_browser(page) -> None:
    assignment_row(page, "fetched").locator('.item_status button:text-is("Submit")').click()
    assignment_row(page, "submitted").wait_for(timeout=60_000)


def fetch_feedback_in_browser(page) -> bool:
    """Refresh the panel, press Fetch Feedback, follow "(view feedback)" to the file browser;
    True when the file browser lists the feedback page."""
    page.locator("#refresh_assignments_list").click()
    button = page.locator('#submitted_assignments_list button:text-is("Fetch Feedback")').first
    button.wait_for(timeout=60_000)
    button.click()
    link = page.locator("#submitted_assignments_list a", has_text="(view feedback)").first
    try:
        link.wait_for(timeout=30_000)
    except Exception:  # noqa: BLE001 - Playwright's TimeoutError: nothing was fetched
        return False
    link.click()
    listed = page.locator(".jp-DirListing-item", has_text=f"{ASSIGNMENT}.html")
    try:
        listed.wait_for(timeout=30_000)
    except Exception:  # noqa: BLE001 - Playwright's TimeoutError: the feedback never showed
        return False
    return True


def formgrader_scores(page, user: str, student_ids: list[str]) -> dict[str, str]:
    """The formgrader in a browser tab of its own → Manage Students: each student's 'score / max'.

    Not Nbgrader → Formgrader inside JupyterLab: since JupyterHub 4.1 single-user servers
    forbid being framed (Content-Security-Policy frame-ancestors 'none'), so that panel shows
    "refused to connect"; nbgrader's documentation ("Using nbgrader with JupyterHub") says to
    open the formgrader in its own tab.
    """
    page.wait_for_url(re.compile(rf"/user/{re.escape(user)}/formgrader"), timeout=240_000)
    page.locator('a:text-is("Manage Students")').click()
    scores = {}
    for student in student_ids:
        cell = page.locator("tbody tr").filter(has=page.locator("td", has_text=student)).first.locator("td.score")
        cell.wait_for(timeout=60_000)
        scores[student] = cell.inner_text().strip()
    return scores


def open_submission(page, hub_url: str, user: str, student: str) -> dict:
    """The formgrader's view of a student's graded notebook: did any of the student's script run?"""
    base = f"{hub_url}/user/{user}/formgrader"
    listed = page.request.get(f"{base}/api/submitted_notebooks/{ASSIGNMENT}/{ASSIGNMENT}").json()
    submission = next(entry["id"] for entry in listed if entry["student"] == student)
    page.goto(f"{base}/submissions/{submission}/")
    page.get_by_text(XSS_TEXT).first.wait_for(timeout=60_000)
    page.wait_for_load_state("load")
    # The images' error events fire once the page has loaded them (onerror would run then).
    page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=30_000)
    ran = page.evaluate("() => new Promise(done => setTimeout(() => done(window.__lncXss || null), 200))")
    return {"title": page.title(), "ran": ran}


# -- the classroom -----------------------------------------------------------------------------
def instructor_config(course: Path) -> str:
    # nbgrader's "One Class, One Grader" set-up. nbgrader (the formgrader too) then also reads
    # the course's own nbgrader_config.py: the gradebook in build/, the HTML sanitiser.
    return ("c = get_config()\n"
            f"c.CourseDirectory.root = {str(course)!r}\n")


def hub_nbgrader_config(exchange: Path) -> str:
    return ("c = get_config()\n"
            f"c.Exchange.root = {str(exchange)!r}\n"
            f"c.CourseDirectory.course_id = {COURSE_ID!r}\n")


# `make build` for one assignment of a course copy, run by the instructor in the copy (`make build`
# itself builds the checkout the grader package belongs to): `python -m grader build --root .`.


def copy_course(course: Path, instructor) -> None:
    """What `make build` needs of the course, copied into the instructor's home, owned by them."""
    course_helpers.copy_course(course)
    lab_settings = {f".jupyter/lab/user-settings/{k}": json.dumps(v) for k, v in LAB_SETTINGS.items()}
    give_home(instructor, {".jupyter/nbgrader_config.py": instructor_config(course), **lab_settings})


def give_home(user, files: dict[str, str]) -> None:
    """Files in the user's home, owned by the user (what an administrator's skeleton would do)."""
    for relative, text in files.items():
        path = Path(user.pw_dir) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder, dirs, names in os.walk(user.pw_dir):
        for name in [*dirs, *names]:
            os.chown(os.path.join(folder, name), user.pw_uid, user.pw_gid)


def gather_evidence(out: dict) -> dict:
    """What the tests check, read before the users and their homes are removed."""
    course, names, users = out["course"], out["names"], out["users"]
    evidence = {"submitted": {}, "feedback": {}, "fetched_feedback": {}, "modes": {}}
    for role in [*STUDENTS, HOSTILE]:
        name, home = names[role], Path(users[role].pw_dir)
        written = home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        submitted = course / "submitted" / name / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        evidence["submitted"][role] = submitted.exists() and (
            nbformat.read(submitted, as_version=4) == nbformat.read(written, as_version=4))
        feedback = course / "feedback" / name / ASSIGNMENT / f"{ASSIGNMENT}.html"
        evidence["feedback"][role] = feedback.read_text(encoding="utf-8") if feedback.exists() else None
        evidence["fetched_feedback"][role] = [p.read_text(encoding="utf-8")
                                              for p in sorted((home / ASSIGNMENT / "feedback")
                                                              .glob(f"*/{ASSIGNMENT}.html"))]
    autograded = course / "autograded" / names[HOSTILE] / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    evidence["autograded_probe"] = None
    if autograded.exists():
        outputs = [o.get("text", "") for c in nbformat.read(autograded, as_version=4).cells
                   if c.cell_type == "code" for o in c.get("outputs", [])]
        evidence["autograded_probe"] = read_probe("".join(outputs))
    evidence["points"] = exercise_points(nbformat.read(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
                                                       as_version=4))
    for path in [Path(users[r].pw_dir) for r in users] + [course, course / "submitted", course / "autograded",
                                                          course / "feedback", out["exchange"]]:
        if path.exists():
            evidence["modes"][str(path)] = oct(path.stat().st_mode & 0o7777)
    return evidence


def new_in_tmp(before: set[str], uid: int) -> list[str]:
    """Names in /tmp that were not in ``before`` and belong to ``uid``. Other processes (another test
    worker's) create and remove their own files meanwhile: one gone before it is looked at is not ours."""
    found = []
    for path in Path("/tmp").iterdir():
        if path.name in before:
            continue
        try:
            if path.lstat().st_uid == uid:
                found.append(path.name)
        except FileNotFoundError:
            continue
    return sorted(found)


@pytest.fixture(scope="module")
def classroom():
    if not sys.platform.startswith("linux"):
        unavailable("Linux only (users, namespaces)")
    if os.geteuid() != 0:
        unavailable("needs root: it creates Linux users and runs JupyterHub's local process spawner")
    missing = [tool for tool in ("useradd", "userdel", "chpasswd", "runuser", "unshare", "mount", "node")
               if not shutil.which(tool)]
    if missing:
        unavailable(f"missing tools: {', '.join(missing)}")
    if not os.path.exists(CHROMIUM):
        unavailable(f"{CHROMIUM} is missing: run tools/ensure-chromium")
    if importlib.util.find_spec("jupyterhub") is None:
        unavailable("jupyterhub is not installed (pip install -c constraints.txt -e '.[dev]')")
    from tests import classroom_helpers as helpers

    if not os.access(helpers.PROXY, os.X_OK):
        unavailable(f"{helpers.PROXY} is missing: run tools/ensure-proxy")
    from playwright.sync_api import sync_playwright

    steps = Steps()
    tag = secrets.token_hex(3)
    roles = ["instructor", *STUDENTS, HOSTILE]
    names = {role: f"lnc-{tag}-{'instr' if role == 'instructor' else role}" for role in roles}
    passwords = {role: secrets.token_urlsafe(12) for role in roles}
    base = Path(tempfile.mkdtemp(prefix="lnc-classroom-"))
    os.chmod(base, 0o755)
    exchange, config_path = base / "exchange", base / "etc" / "jupyter"
    out: dict = {"names": names, "base": base, "exchange": exchange, "teardown": [], "commands": []}
    users, uids, hub, running = {}, [], None, []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in SCREENSHOTS.iterdir():
        old.unlink()
    nbgrader = str(Path(sys.executable).parent / "nbgrader")
    try:
        with steps("users; hub starts (make build runs meanwhile)"):
            for role in roles:
                users[role] = helpers.create_user(names[role], passwords[role])
                uids.append(users[role].pw_uid)
            # The exchange as nbgrader's docs set it up (a folder everyone may write; the sticky
            # bit keeps users from removing each other's entries); the hub-wide configuration.
            exchange.mkdir()
            os.chmod(exchange, 0o1777)
            config_path.mkdir(parents=True)
            (config_path / "nbgrader_config.py").write_text(hub_nbgrader_config(exchange))
            for folder in (base / "etc", config_path):
                os.chmod(folder, 0o755)
            setup = helpers.namespace_setup(base / "staging")
            user_env = {"JUPYTER_CONFIG_PATH": str(config_path), "MPLBACKEND": "Agg"}
            hub = helpers.Hub(base / "hub", setup, [names[r] for r in roles], config_path)
            lab_settings = {f".jupyter/lab/user-settings/{k}": json.dumps(v) for k, v in LAB_SETTINGS.items()}
            for role in [*STUDENTS, HOSTILE]:
                give_home(users[role], lab_settings)
            instructor = users["instructor"]
            course = Path(instructor.pw_dir) / "course"
            out.update(course=course, users=users, setup=setup)

            def start_as(role: str, argv: list[str], cwd: Path | None = None):
                process = helpers.start_as(setup, users[role], argv, str(cwd or users[role].pw_dir), user_env)
                running.append(process)
                return process

            copy_course(course, instructor)
            # runs on meanwhile
            build = start_as("instructor", [sys.executable, "-m", "grader", "build", ASSIGNMENT, "--root", str(course)],
                             course)
            hub.wait_ready()
            out["hub"] = hub.url

        def finish(role: str, process, what: str, must_succeed: bool = True):
            done = helpers.finish(process)
            out["commands"].append((role, done.args, done.returncode))
            (SCREENSHOTS / f"{what}.log").write_text(f"$ {' '.join(done.args)}\n{done.stdout}\n{done.stderr}")
            if must_succeed:
                assert done.returncode == 0, f"{role}: {what} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
            return done

        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            pages = {}
            try:
                contexts = {role: browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
                            for role in [*STUDENTS, "instructor"]}
                for context in contexts.values():
                    context.set_default_timeout(60_000)
                with steps("students log in (servers spawn); make build ends; instructor releases"):
                    for role in STUDENTS:
                        pages[role] = start_login(contexts[role], hub.url, names[role], passwords[role])
                    finish("instructor", build, "build")
                    release = start_as("instructor", [nbgrader, "release_assignment", ASSIGNMENT], course)
                    finish("instructor", release, "release_assignment")
                    assert (exchange / COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").exists()
                    hostile_fetch = start_as(HOSTILE, [nbgrader, "fetch_assignment", ASSIGNMENT])
                    for role in STUDENTS:
                        wait_for_lab(pages[role], names[role])

                with steps("students fetch (Assignments panel)"):
                    for role in STUDENTS:
                        fetch_in_browser(pages[role])
                        fetched = Path(users[role].pw_dir) / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
                        assert helpers.poll(fetched.exists, 30), f"{role}: the fetched notebook is not in the home"
                        out.setdefault("fetched", {})[role] = fetched

                with steps("students work (notebook written as the student)"):
                    # full: the course's solved notebook as it is; half: the first half of the
                    # exercises (rounded down) typed into the fetched notebook; nothing: as fetched.
                    solutions = course / "solutions" / f"{ASSIGNMENT}.ipynb"
                    answers = [c.id for c in nbformat.read(out["fetched"]["s1"], as_version=4).cells
                               if c.metadata.get("nbgrader", {}).get("solution")]
                    draft = base / "draft-s2.ipynb"
                    shutil.copy(out["fetched"]["s2"], draft)
                    out["solved"] = {"s1": answers, "s2": splice(draft, solutions, max(1, len(answers) // 2)),
                                     "s3": []}
                    helpers.write_as(users["s1"], out["fetched"]["s1"], solutions.read_bytes())
                    helpers.write_as(users["s2"], out["fetched"]["s2"], draft.read_bytes())

                with steps("students submit (Assignments panel); hostile student submits (command line)"):
                    finish(HOSTILE, hostile_fetch, "fetch_assignment-hostile")
                    notebook = Path(users[HOSTILE].pw_dir) / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
                    nb = nbformat.read(notebook, as_version=4)
                    forbidden = [str(exchange), str(exchange / COURSE_ID / "inbound"),
                                 str(exchange / COURSE_ID / "outbound"), str(base), str(config_path),
                                 *(users[r].pw_dir for r in roles), str(course),
                                 str(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py"),
                                 str(course / "build" / "gradebook.db"), str(course / "submitted"),
                                 str(ROOT / "solutions" / f"{ASSIGNMENT}.ipynb"), str(ROOT / "source")]
                    targets = [("127.0.0.1", int(hub.url.rsplit(":", 1)[1])), ("pypi.org", 443)]
                    out["probe_paths"], out["probe_targets"] = forbidden, targets
                    nb.cells.append(nbformat.v4.new_code_cell(
                        PROBE % {"paths": forbidden, "targets": targets, "mark": PROBE_MARK}))
                    nb.cells += [nbformat.v4.new_markdown_cell(XSS_MARKDOWN), nbformat.v4.new_code_cell(XSS_OUTPUT)]
                    helpers.write_as(users[HOSTILE], notebook, nbformat.writes(nb).encode())
                    hostile_submit = start_as(HOSTILE, [nbgrader, "submit", ASSIGNMENT])
                    private = [*(users[r].pw_dir for r in roles if r != HOSTILE), str(course),
                               str(course / "submitted"), str(exchange / COURSE_ID / "inbound")]
                    look = finish(HOSTILE, start_as(HOSTILE, [sys.executable, "-c", LOOK_AROUND,
                                                              json.dumps(private)]), "look-around-hostile")
                    out["student_view"] = json.loads(look.stdout.strip().splitlines()[-1])
                    for role in STUDENTS:
                        submit_in_browser(pages[role])
                    screenshot(pages["s1"], "student-assignments")
                    finish(HOSTILE, hostile_submit, "submit-hostile")

                with steps("instructor: nbgrader collect; logs in to the formgrader (server starts)"):
                    collect = start_as("instructor", [nbgrader, "collect", ASSIGNMENT], course)
                    # The formgrader in a tab of its own (see formgrader_scores); the server starts now.
                    pages["instructor"] = start_login(contexts["instructor"], hub.url, names["instructor"],
                                                      passwords["instructor"],
                                                      next_path=f"/user/{names['instructor']}/formgrader")
                    pages["instructor"].locator("#start").click()  # "Server not running": Launch Server
                    out["collect"] = finish("instructor", collect, "collect")

                with steps("instructor: python -m grader grade"):
                    tmp_before = {p.name for p in Path("/tmp").iterdir()}
                    grade = start_as("instructor", [sys.executable, "-m", "grader", "grade", ASSIGNMENT,
                                                    "--root", str(course)], course)
                    out["grade"] = finish("instructor", grade, "grade", must_succeed=False)
                    out["tmp_left"] = new_in_tmp(tmp_before, instructor.pw_uid)
                    csv_path = course / "build" / "grades.csv"
                    out["scores"] = {}
                    if csv_path.exists():
                        with open(csv_path, newline="") as f:
                            out["scores"] = {r["student_id"]: (float(r["raw_score"]), float(r["max_score"]))
                                             for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT}

                with steps("instructor: formgrader (browser)"):
                    out["formgrader"] = formgrader_scores(pages["instructor"], names["instructor"],
                                                          [names[r] for r in (*STUDENTS, HOSTILE)])
                    screenshot(pages["instructor"], "formgrader")
                    out["formgrader_submission"] = open_submission(pages["instructor"], hub.url,
                                                                   names["instructor"], names[HOSTILE])

                with steps("instructor: nbgrader release_feedback"):
                    out["release_feedback"] = finish(
                        "instructor", start_as("instructor", [nbgrader, "release_feedback", ASSIGNMENT], course),
                        "release_feedback")

                with steps("students fetch feedback (Assignments panel; the hostile one: command line)"):
                    hostile_feedback = start_as(HOSTILE, [nbgrader, "fetch_feedback", ASSIGNMENT])
                    out["feedback_link"] = {}
                    for role in STUDENTS:
                        out["feedback_link"][role] = fetch_feedback_in_browser(pages[role])
                    screenshot(pages["s1"], "student-feedback")
                    finish(HOSTILE, hostile_feedback, "fetch_feedback-hostile")
                out["evidence"] = gather_evidence(out)
                print("[classroom] modes: " + ", ".join(f"{p} {m}" for p, m in out["evidence"]["modes"].items()))
            except BaseException:
                for role, page in pages.items():  # what each user saw when it failed
                    try:
                        screenshot(page, f"FAILED-{role}")
                    except Exception:  # noqa: BLE001 - (a page that is gone)
                        pass
                raise
            finally:
                browser.close()
    finally:
        began = time.monotonic()
        for process in running:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if hub is not None:
            hub.stop()
            (SCREENSHOTS / "jupyterhub.log").write_text(hub.log_tail(10**7))
        if out.get("course") is not None:  # the grader's messages, for whoever reads a failure
            for path in (out["course"] / "build" / "grading" / ASSIGNMENT).glob("*.json"):
                shutil.copy(path, SCREENSHOTS / f"grading-{path.name}")
        if not helpers.kill_processes(uids):
            out["teardown"].append("processes of the throw-away users survived SIGKILL")
        for role in roles:
            problem = helpers.remove_user(names[role])
            if problem:
                out["teardown"].append(problem)
        for entry in Path("/tmp").iterdir():  # anything the throw-away uids left in /tmp
            try:
                if entry.lstat().st_uid in uids:
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            except FileNotFoundError:
                continue  # another process's temporary file, already gone
            except OSError as error:
                out["teardown"].append(f"could not remove {entry}: {error}")
        shutil.rmtree(base, ignore_errors=True)
        steps.times.append(("teardown: users' processes, hub, users and homes removed", time.monotonic() - began))
        print("\n[classroom] time per step\n" + steps.table(), flush=True)
    return out


# -- what the classroom showed -----------------------------------------------------------------
def test_students_work_reached_the_instructor(classroom):
    """Fetched and submitted in the panel (or on the command line), collected: as each student wrote it."""
    not_collected = [r for r, same in classroom["evidence"]["submitted"].items() if not same]
    assert not not_collected, f"not collected as written: {not_collected}"


def test_collect_kept_its_owner_check(classroom):
    """Real users: nbgrader collect's check that a submission belongs to its student passes, switched on."""
    assert not any("check_owner" in " ".join(argv) for _, argv, _ in classroom["commands"])
    collect = classroom["collect"]
    assert "check_owner" not in collect.stdout + collect.stderr, collect.stderr[-3000:]


def test_the_instructor_grades_without_root_in_userns(classroom):
    grade = classroom["grade"]
    output = grade.stdout + grade.stderr
    assert classroom["users"]["instructor"].pw_uid != 0
    assert grade.returncode == 0, f"grader grade exited {grade.returncode}:\n{output[-6000:]}"
    assert re.search(r"^isolation: userns\b", output, re.M), output[-3000:]
    assert "Traceback" not in output and "PermissionError" not in output, output[-6000:]
    assert "other users of this machine can enter" not in output, "the course in a 0700 home looked exposed"


def test_scores(classroom):
    """Everything solved = the maximum; the first half = those exercises' points; nothing = 0."""
    per_exercise, total = classroom["evidence"]["points"]
    half = len(classroom["solved"]["s2"])
    names, scores = classroom["names"], classroom["scores"]
    expected = {"s1": total, "s2": sum(per_exercise[:half]), "s3": 0.0, HOSTILE: 0.0}
    got = {role: scores.get(names[role]) for role in expected}
    assert got == {role: (points, total) for role, points in expected.items()}, (
        f"{got}\n{classroom['grade'].stdout[-3000:]}")


def test_feedback_for_every_student(classroom):
    missing = [role for role, text in classroom["evidence"]["feedback"].items() if text is None]
    assert not missing, (f"no feedback for {missing}:\n"
                         f"{classroom['grade'].stdout[-2000:]}{classroom['grade'].stderr[-4000:]}")


def test_hostile_submission_saw_nothing(classroom):
    """From inside the grading sandbox: no exchange, no home, no course file, no checkout, no network."""
    feedback = classroom["evidence"]["feedback"][HOSTILE]
    probe = read_probe(page_text(feedback)) if feedback else None
    assert probe is not None, (
        "the probe's report is not in the hostile student's feedback" + (
            f" (the autograded notebook has it: {classroom['evidence']['autograded_probe']})"
            if classroom["evidence"]["autograded_probe"] else ""))
    seen = {path: what for path, what in probe["paths"].items() if not what.startswith("hidden")}
    assert set(probe["paths"]) == set(classroom["probe_paths"])
    assert not seen, f"the sandbox saw {seen}"
    # /home may exist on the way to the sandbox's own home, unlisted or listing only that one
    assert not isinstance(probe["home"], list) or probe["home"] == ["learner"], f"/home: {probe['home']}"
    reached = {target: what for target, what in probe["network"].items() if not what.startswith("failed")}
    assert len(probe["network"]) == len(classroom["probe_targets"]) and not reached, probe["network"]


def test_a_student_cannot_list_the_course_the_homes_or_the_submissions(classroom):
    """The permissions that matter, seen from a student's own account: homes 0700 (the course in
    the instructor's), the exchange's inbound folder write-only for students (nbgrader's 0733)."""
    listed = {path: what for path, what in classroom["student_view"].items() if not what.startswith("hidden")}
    assert not listed, f"a student can list {listed}"


def test_formgrader_shows_the_grades(classroom):
    names, scores = classroom["names"], classroom["scores"]
    expected = {role: f"{js_number(scores[names[role]][0])} / {js_number(scores[names[role]][1])}"
                for role in [*STUDENTS, HOSTILE] if names[role] in scores}
    shown = {role: classroom["formgrader"][names[role]] for role in expected}
    assert expected and len(expected) == len(STUDENTS) + 1, scores
    assert shown == expected


def test_the_formgrader_runs_no_student_script(classroom):
    """The instructor's formgrader renders a submission with the course's HTML sanitiser."""
    seen = classroom["formgrader_submission"]
    assert seen["ran"] is None and "PWNED" not in seen["title"], f"student script ran in the formgrader: {seen}"


def test_students_fetch_their_feedback_in_the_browser(classroom):
    evidence = classroom["evidence"]
    for role in STUDENTS:
        assert classroom["feedback_link"][role], f"{role}: the Assignments panel offered no fetched feedback"
    for role in [*STUDENTS, HOSTILE]:  # the hostile student fetched theirs with nbgrader fetch_feedback
        assert evidence["fetched_feedback"][role] == [evidence["feedback"][role]], (
            f"{role}: the feedback in the home is not the released one")


def test_grading_leaves_nothing_in_tmp(classroom):
    assert not classroom["tmp_left"], f"grading left in /tmp: {classroom['tmp_left']}"


def test_throw_away_users_are_gone(classroom):
    import pwd

    assert not classroom["teardown"], classroom["teardown"]
    for name in classroom["names"].values():
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
        assert not os.path.exists(f"/home/{name}")
