"""`python -m grader export`: Canvas, Moodle and csv files from a gradebook (grader/grading/export/).

No grading here: the gradebook is written with nbgrader's own API (scores, an autograder diagnosis in a
comment), once per module. Checked: Canvas's header rules (Student, ID, SIS User ID, SIS Login ID, Section,
`Title (id)`, the Points Possible row), filling a Canvas export without touching any other byte, Moodle's
identifier column and grade/feedback pairs, quoting (a name with a comma, quotes, a line break, Unicode
survives csv.reader), the roster lined up with the gradebook (both kinds of mismatch listed on the
terminal), --missing, and that points come only from the gradebook.
"""
import csv
import io

import pytest

from grader.grading.export import canvas, moodle, nbgrader_csv, rawcsv
from grader.grading.export.command import main as export_main
from grader.grading.export.gradebook import GradebookError, format_points, read_class
from grader.grading.export.roster import Learner, RosterError, parse_roster, reconcile

# slow: a real nbgrader gradebook built per module (~8 s)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Object of type <Submitted")]

A, B = "03_backward", "04_rmsnorm"
ROSTER = (
    "\ufeffNBGRADER_ID,Name,Sortable Name,Email,SIS User ID,SIS Login ID,Canvas User ID,Section,Username,IDNumber\n"
    'ada,Ada Lovelace,"Lovelace, Ada",ada@uni.example,S1,ada,101,A,ada,N1\n'
    'chloé,"Chloé ""Clo"" Dupré","Dupré, Chloé ""Clo""",chloe@uni.example,S3,chloe,103,A,chloe,N3\n'
    'zoë,"Zoë, Line\nBreak",,zoe@uni.example,,,,B,,\n'
    "nosub,No Submission,,nosub@uni.example,S9,nosub,109,B,nosub,N9\n")


def cells(text):
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course folder whose build/gradebook.db holds two assignments and four learners."""
    import os

    from nbgrader.api import Gradebook

    from grader.course import tool_environment

    os.environ["PATH"] = tool_environment()["PATH"]  # nbgrader's gradebook runs `alembic` by name
    root = tmp_path_factory.mktemp("export") / "course"
    (root / "build").mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(
        "import os\nc = get_config()\nc.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))\n"
        "c.CourseDirectory.db_url = 'sqlite:///' + os.path.join(c.CourseDirectory.root, 'build', 'gradebook.db')\n")
    url = f"sqlite:///{root / 'build' / 'gradebook.db'}"
    scores = {  # (assignment, student) -> {test cell: auto score}
        (A, "ada"): {"test_one": 2, "test_two": 5}, (A, "chloé"): {"test_one": 2, "test_two": 0},
        (A, "hacker"): {"test_one": 0, "test_two": 0}, (A, "zoë"): {"test_one": 0.5, "test_two": 0},
        (B, "ada"): {"test_one": 1, "test_two": 3}}
    with Gradebook(url) as gb:
        for name in (A, B):
            gb.add_assignment(name)
            gb.add_notebook(name, name)
            gb.add_solution_cell("one", name, name)
            gb.add_grade_cell("test_one", name, name, max_score=2, cell_type="code")
            gb.add_grade_cell("test_two", name, name, max_score=5, cell_type="code")
        for student in ("ada", "chloé", "hacker", "zoë"):
            gb.add_student(student, first_name=student.title(), last_name="Q, \"R\"")
        for (name, student), cell_scores in scores.items():
            gb.add_submission(name, student)
            notebook = gb.find_submission_notebook(name, name, student)
            for grade in notebook.grades:
                grade.auto_score = cell_scores[grade.name]
            for comment in notebook.comments:
                if student == "chloé":
                    comment.auto_comment = ("No response.\n\nAutograder diagnosis:\n\n"
                                            "- test_two: Unbiased variance [ln.unbiased_variance]")
            gb.db.commit()
    return root


def test_roster_reads_aliases_unicode_and_quotes():
    learners = parse_roster(ROSTER)
    assert [learner.nbgrader_id for learner in learners] == ["ada", "chloé", "zoë", "nosub"]
    assert learners[1].name == 'Chloé "Clo" Dupré' and learners[1].lms_user_id == "103"
    assert learners[2].name == "Zoë, Line\nBreak" and learners[0].idnumber == "N1"
    with pytest.raises(RosterError, match="nbgrader_id"):
        parse_roster("name,email\nx,y\n")
    with pytest.raises(RosterError, match="twice"):
        parse_roster("id\nada\nada\n")


def test_the_gradebook_is_read_and_reconciled(course):
    grades = read_class(course, [A, B])
    assert grades.assignments == {A: 7.0, B: 7.0}
    assert grades.scores[(A, "ada")].score == 7.0 and grades.scores[(A, "hacker")].score == 0.0
    assert grades.scores[(A, "chloé")].failed == ("test_two",)
    assert grades.scores[(A, "chloé")].diagnoses == ("test_two: Unbiased variance [ln.unbiased_variance]",)
    matched = reconcile(parse_roster(ROSTER), grades)
    assert matched.not_in_roster == ["hacker"]
    assert ("nosub", A) in matched.no_submission and ("chloé", B) in matched.no_submission
    assert [learner.nbgrader_id for learner in matched.learners][-1] == "hacker"  # kept, after the roster's learners
    with pytest.raises(GradebookError, match="not in the gradebook: 99_none"):
        read_class(course, ["99_none"])


def test_canvas_import_header_points_possible_and_scores(course):
    grades = read_class(course, [A, B])
    learners = reconcile(parse_roster(ROSTER), grades).learners
    text, left_out = canvas.write_import(grades, learners, {A: "4721"}, missing="zero")
    rows = cells(text)
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"{A} (4721)", B]
    assert canvas.TITLED.match(rows[0][5])["id"] == "4721" and not canvas.TITLED.match(rows[0][6])
    assert rows[1] == ["Points Possible", "", "", "", "", "7", "7"]
    by_id = {r[1] or r[3]: r for r in rows[2:]}
    assert by_id["101"] == ["Lovelace, Ada", "101", "S1", "ada", "A", "7", "4"]
    assert by_id["103"][0] == 'Dupré, Chloé "Clo"' and by_id["103"][5:] == ["2", "0"]
    assert by_id["109"][5:] == ["0", "0"]  # no submission, --missing zero
    # zoë has no Canvas identity, hacker is not in the roster: named, never silently gone
    assert left_out == ["zoë", "hacker"]
    blank, _ = canvas.write_import(grades, learners, {}, missing="blank")
    assert {r[1]: r for r in cells(blank)[2:]}["109"][5:] == ["", ""]
    assert text.count("\r\n") == len(rows)


CANVAS_EXPORT = (
    "\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,Quiz 1 (11),03_backward (4721),Current Score,Final Grade\r\n"
    "    Points Possible,,,,,10.00,7.00,(read only),(read only)\r\n"
    '"Lovelace, Ada",101,S1,ada,A,9.50,,95.00,A\r\n'
    '"Dupré, Chloé ""Clo""",103,,,A,8,"5",80,B\r\n'
    '"Someone, Else",999,S99,else,"A, B",7,3,70,"C ""minus"""\r\n'
    '"No, Sub",109,S9,nosub,B,1,6,10,F\r\n'
    '"Student, Test",1,,,A,,,,\r\n')


def test_canvas_export_is_filled_and_every_other_byte_kept(course):
    grades = read_class(course, [A])
    learners = reconcile(parse_roster(ROSTER), grades).learners
    assert rawcsv.join(rawcsv.split(CANVAS_EXPORT)) == CANVAS_EXPORT
    filled, unmatched = canvas.fill_export(CANVAS_EXPORT, grades, learners, {A: "4721"}, missing="blank")
    expected = (CANVAS_EXPORT.replace('"Lovelace, Ada",101,S1,ada,A,9.50,,', '"Lovelace, Ada",101,S1,ada,A,9.50,7,')
                .replace('103,,,A,8,"5",', "103,,,A,8,2,"))
    assert filled == expected  # nosub keeps its 6 (blank: untouched), the stranger and the test student too
    assert unmatched["rows not in the roster"] == ["Someone, Else", "Student, Test"]
    assert unmatched["roster learners not in the export"] == ["zoë", "hacker"]
    zero, _ = canvas.fill_export(CANVAS_EXPORT, grades, learners, {}, missing="zero")  # matched by title
    assert '"No, Sub",109,S9,nosub,B,1,0,10,F\r\n' in zero
    with pytest.raises(ValueError, match="not a Canvas gradebook export"):
        canvas.fill_export("a,b\r\n", grades, learners, {})


def test_moodle_identifier_and_grade_feedback_pairs(course):
    grades = read_class(course, [A, B])
    learners = reconcile(parse_roster(ROSTER), grades).learners
    for field in ("email", "username", "idnumber"):
        text, left_out = moodle.write_import(grades, learners, field, missing="zero")
        rows = cells(text)
        assert rows[0] == [field, A, f"{A} feedback", B, f"{B} feedback"]
        assert all(len(r) == 5 for r in rows)  # every feedback column beside its grade column
        assert "hacker" in left_out  # not in the roster: no Moodle identity
        if field == "email":
            by_key = {r[0]: r for r in rows[1:]}
            assert by_key["chloe@uni.example"][1] == "2"
            assert "Not passed: test_two" in by_key["chloe@uni.example"][2]
            assert "Unbiased variance" in by_key["chloe@uni.example"][2]
            assert by_key["nosub@uni.example"][1:3] == ["0", "No submission."]
        if field == "username":
            assert "zoë" in left_out  # no username in the roster
    blank, _ = moodle.write_import(grades, learners, "email", missing="blank")
    assert {r[0]: r for r in cells(blank)[1:]}["nosub@uni.example"][1:] == ["", "", "", ""]
    with pytest.raises(ValueError):
        moodle.write_import(grades, learners, "name")


def test_csv_has_nbgraders_columns_quoted(course):
    grades = read_class(course, [A])
    learners = reconcile(parse_roster(ROSTER), grades).learners
    rows = cells(nbgrader_csv.write_csv(grades, learners))
    assert rows[0] == nbgrader_csv.COLUMNS
    assert all(len(r) == len(nbgrader_csv.COLUMNS) for r in rows)
    by_id = {r[3]: dict(zip(rows[0], r, strict=True)) for r in rows[1:]}
    assert by_id["chloé"]["last_name"] == 'Q, "R"' and by_id["chloé"]["score"] == "2.0"
    assert by_id["nosub"]["score"] == "0.0" and by_id["hacker"]["score"] == "0.0"
    blank = {r[3]: r for r in cells(nbgrader_csv.write_csv(grades, learners, "blank"))}
    assert blank["nosub"][7:10] == ["", "", ""]


def test_points_come_only_from_the_gradebook(course):
    """A learner the gradebook scored 0 is 0 in every export, whatever the roster or Canvas file says."""
    grades = read_class(course, [A])
    hostile = Learner("hacker", name="Hacker", email="h@x", sis_login_id="hacker", username="hacker", idnumber="7")
    for text in (canvas.write_import(grades, [hostile], {})[0], moodle.write_import(grades, [hostile])[0],
                 nbgrader_csv.write_csv(grades, [hostile])):
        row = cells(text)[-1]
        assert "7" not in row[5:6] and ("0" in row or "0.0" in row), row
    assert [format_points(x) for x in (7.0, 3.5, 2 / 3, 0.0)] == ["7", "3.5", "0.666667", "0"]


def test_the_command_lists_mismatches_and_round_trips_names(course, tmp_path, capsys):
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER, encoding="utf-8")
    out = tmp_path / "canvas.csv"
    assert export_main(["export", A, "--to", "canvas", "--root", str(course), "--roster", str(roster),
                        "--out", str(out), "--canvas-id", f"{A}=4721"]) == 0
    err = capsys.readouterr().err
    assert "not in the roster (1): hacker" in err
    assert "no submission" in err and "nosub (03_backward)" in err
    assert "NOT EXPORTED" in err and "zoë" in err
    names = [r[0] for r in cells(out.read_bytes().decode("utf-8"))]
    assert 'Dupré, Chloé "Clo"' in names and "Lovelace, Ada" in names
    out_moodle = tmp_path / "moodle.csv"
    assert export_main(["export", A, B, "--to", "moodle", "--root", str(course), "--roster", str(roster),
                        "--out", str(out_moodle), "--moodle-id", "idnumber"]) == 0
    assert cells(out_moodle.read_text(encoding="utf-8"))[0][0] == "idnumber"
    assert export_main(["export", "99_none", "--to", "csv", "--root", str(course)]) == 2
    assert export_main(["export", A, "--to", "canvas", "--root", str(course), "--canvas-id", "x"]) == 2
