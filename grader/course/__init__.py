"""Course tooling: build the three editions from source/ and drive nbgrader's generators.

Imports the learner side (the checks the notebooks call); never the grading server.
"""
