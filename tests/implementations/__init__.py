"""Correct and classic wrong implementations of the exercises, used to test the checks."""
