"""The grading sandbox: where learner code runs (isolation, the zygote, the worker and the channel to it)."""
