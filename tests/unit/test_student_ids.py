"""A learner's folder name reaches nbgrader as a literal, never as a pattern.

nbgrader finds a submission by globbing ``{step}/{student_id}/{assignment}`` and reads the
id back from the path, so an unescaped learner named ``*`` would have every classmate's
submission sanitised, recorded and given feedback under their phase. nbgrader also globs the
matched folder's path itself when it lists notebooks, so ``grader grade`` does not grade such a
learner at all (tests/integration/test_hostile.py: told why, exit 3); the escaping here is the second guard.
"""
import glob

import pytest

from grader.grading.autograde.nbgrader_steps import course_directory


@pytest.mark.parametrize("name", ["*", "[ab]", "a?", "ada"])
def test_a_learner_folder_matches_only_itself(tmp_path, name):
    for learner in {name, "ada", "ab", "a", "bob", "ax"}:
        (tmp_path / "submitted" / learner / "A").mkdir(parents=True)
    coursedir = course_directory(None, tmp_path, "A", name)
    matched = glob.glob(coursedir.format_path("submitted", coursedir.student_id, "A"))
    assert [path.split("/")[-2] for path in matched] == [name]
