"""``GradeConfig``: every setting of ``python -m grader grade``, in one traitlets Configurable.

Set in the course's ``nbgrader_config.py`` the nbgrader way (``c.GradeConfig.cell_timeout = 60``),
overridden on the command line (``--timeout 60`` or ``--GradeConfig.cell_timeout=60``), listed
with ``python -m grader grade --help-all``. Precedence: default < config file < command line.
``LNCOURSE_ISOLATION``, when set, is the default of ``isolation`` (the config file and the
command line still override it).
"""
from __future__ import annotations

import os
from pathlib import Path

from traitlets import Bool, Float, Integer, Unicode, default, validate
from traitlets.config import Config, Configurable


class GradeConfig(Configurable):
    """How ``python -m grader grade`` executes a class."""

    jobs = Integer(0, help="Notebooks executed in parallel, one warm sandbox worker each (0: one per CPU core)."
                   ).tag(config=True)
    cell_timeout = Float(120.0, help="Seconds one cell may run: each learner cell, and each test cell with all "
                         "its calls into the sandbox together. Plain nbgrader's Execute.timeout is set from it in "
                         "nbgrader_config.py.").tag(config=True)
    notebook_timeout = Float(600.0, help="Seconds one notebook may run, all its cells together.").tag(config=True)
    isolation = Unicode(help="How each notebook's sandbox is confined: 'auto' (the strongest available: a sandbox "
                        "uid as root, else user namespaces; refuses to start otherwise), 'user', 'userns', or "
                        "'basic' (resource limits only: not for a class you do not trust). Default: "
                        "$LNCOURSE_ISOLATION, else 'auto'.").tag(config=True)
    cache_dir = Unicode("", help="Folder of cached job results (JSON, one per learner notebook, keyed by "
                        "sha256 of the submission, the assignment's trusted bundle and the grader). Default: "
                        "build/grading-cache under the course root. Deleting it only costs re-execution."
                        ).tag(config=True)
    use_cache = Bool(True, help="Reuse cached results of unchanged jobs (False: execute every notebook again; "
                     "the new results still replace the cached ones).").tag(config=True)
    grader_version = Unicode("", help="What names this grader in the job keys: '' for a digest of its code "
                             "(every module of grader/ and normlab/), so any change of the grader re-executes every "
                             "job. A name (a release tag) pins it: cached results then survive code changes, which "
                             "is right only if those changes cannot change a verdict. Either way the key also holds "
                             "the environment (Python and every installed package's version), and Dask workers must "
                             "match it.").tag(config=True)
    scheduler = Unicode("", help="Where jobs execute: '' for the local warm pool, or a Dask scheduler's address "
                        "(tcp://HOST:PORT): jobs then run on its workers, which need this project "
                        "installed and root or "
                        "user namespaces for the sandbox (each job travels with its files: no shared filesystem). "
                        "Only this process writes the cache, gradebook and feedback."
                        ).tag(config=True)
    submission_seconds = Float(120.0, help="The budget of one learner's submission in each step after execution "
                                "that handles its bytes: CPU seconds to build its feedback page (a worker over it "
                                "is stopped, and killed a few seconds later if it does not stop; three times it, "
                                "plus 30 s, of wall-clock time). A learner over it gets a plain page with their "
                                "scores, comments and a note instead; the class run goes on.").tag(config=True)
    submission_memory = Integer(2 * 2**30, help="Bytes of memory a feedback worker may add while it builds one "
                                "learner's page; over it the learner gets the plain page (see submission_seconds)."
                                ).tag(config=True)
    notebook_output_characters = Integer(4_000_000, help="Characters of outputs kept of one executed notebook, "
                                         "all its cells together, for the gradebook's copy (autograded/) and the "
                                         "feedback; beyond it text is cut and images and HTML are dropped, with a "
                                         "note in the cell and to the learner. Scores do not change.").tag(config=True)
    public_apis_only = Bool(False, help="Grade with no speed patch of another library's private internals "
                            "(grader.grading.seams): slower, the same grades and feedback. What correctness depends "
                            "on and has no public alternative stays (each checked at start: nbgrader's Autograde "
                            "phases and feedback copy, ipykernel's output streams).").tag(config=True)
    scheduler_timeout = Float(20.0, help="Seconds to wait for the Dask scheduler to answer, and again for its "
                              "first worker, before grading stops with nothing scored (exit 2).").tag(config=True)

    @default("isolation")
    def _isolation_default(self):
        return os.environ.get("LNCOURSE_ISOLATION", "auto")

    @validate("jobs")
    def _check_jobs(self, proposal):
        if proposal["value"] < 0:
            raise ValueError("GradeConfig.jobs must be 0 (one per core) or more")
        return proposal["value"]

    @validate("submission_memory", "notebook_output_characters")
    def _check_size(self, proposal):
        if proposal["value"] < 2**16:
            raise ValueError(f"GradeConfig.{proposal['trait'].name} must be at least 65536")
        return proposal["value"]

    @validate("cell_timeout", "notebook_timeout", "scheduler_timeout", "submission_seconds")
    def _check_positive(self, proposal):
        if not proposal["value"] > 0:
            raise ValueError(f"GradeConfig.{proposal['trait'].name} must be a positive number of seconds")
        return proposal["value"]

    def worker_count(self) -> int:
        return self.jobs or os.cpu_count() or 1

    def cache_folder(self, root: Path) -> Path:
        if self.cache_dir:
            return Path(os.path.expanduser(self.cache_dir)).resolve()
        return Path(root) / "build" / "grading-cache"


def file_config(root: Path) -> Config:
    """The course's nbgrader_config.py, loaded the way nbgrader loads it (an empty Config if there is none)."""
    from traitlets.config.loader import PyFileConfigLoader

    if not (Path(root) / "nbgrader_config.py").is_file():
        return Config()
    return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()


def command_line_config(argv: list[str]) -> Config:
    """``--GradeConfig.trait=value`` arguments, parsed by traitlets."""
    from traitlets.config.loader import KVArgParseConfigLoader

    config = KVArgParseConfigLoader(argv=list(argv), classes=[GradeConfig]).load_config()
    unknown = [section for section in config if section != "GradeConfig"]
    if unknown:
        raise ValueError(f"only GradeConfig settings can be given here, not {', '.join(unknown)}")
    return config


def grade_config(root: Path, overrides: dict | None = None, argv: list[str] = (), base: Config | None = None
                 ) -> GradeConfig:
    """The run's GradeConfig: defaults, then the course's config file (``base`` if already loaded),
    then ``argv`` (``--GradeConfig.x=...``), then ``overrides`` (the named options; None = not given)."""
    config = Config()
    config.merge(base if base is not None else file_config(root))
    config.merge(command_line_config(argv))
    given = {name: value for name, value in (overrides or {}).items() if value is not None}
    unknown = set(given) - set(GradeConfig.class_trait_names(config=True))
    if unknown:
        raise ValueError(f"unknown GradeConfig settings: {sorted(unknown)}")
    config.merge(Config({"GradeConfig": given}))
    return GradeConfig(config=config)


def help_all() -> str:
    """Every GradeConfig setting with its help, the way nbgrader's --help-all lists them."""
    return GradeConfig.class_get_help()
