"""Checks for the LayerNorm/RMSNorm course, and the commands that build and grade it.

The notebooks import the checks of their own assignment, e.g.
``from grader.checks.backward import check_layer_norm_jacobian``. Importing this
package itself is cheap: it loads neither torch nor nbgrader.
"""
