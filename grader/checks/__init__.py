"""One module of checks per assignment; each check takes the learner's function."""
