"""What the learner-side checks and the grading sandbox both know about each other.

Checks run in the learner's own kernel (JupyterLab, Colab) and, under ``grader grade``,
in the trusted grader, where the learner's function is a proxy into a sandbox. The types
that cross that boundary are defined here, on the learner side, so that checks never
import the sandbox (the sandbox imports this instead), and so that an exception raised by
the learner's code reads the same in both places: ``learner_exception`` is the one place
that turns an exception's type name from the other side back into an exception.
"""
from __future__ import annotations

import builtins


class SandboxError(Exception):
    """The sandbox died, hung, flooded its output or broke the protocol."""


class LearnerException(Exception):
    """An exception raised by the learner's code, of a type that is not a builtin."""


def learner_exception(type_name: str, message: str) -> BaseException:
    """Rebuild the learner's exception as a builtin of the same name (ValueError stays ValueError).

    Any other type (numpy's AxisError, torch's errors, the learner's own classes) becomes a
    ``LearnerException`` whose message starts with the type's name, so a diagnosis can name it.
    """
    kind = getattr(builtins, type_name, None)
    if isinstance(kind, type) and issubclass(kind, Exception) and kind is not StopIteration:
        rebuilt = kind(message)
        # str() of the original, for exceptions whose str is not their argument (KeyError quotes it)
        rebuilt.sandbox_text = message
        return rebuilt
    return LearnerException(f"{type_name}: {message}")


class Unsupported:
    """Stands for a value of a type that cannot cross (e.g. a torch tensor, a generator).

    Checks see an object of this class, never the original, and report its type name.
    """

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self):
        return f"<{self.type_name} (not transferable)>"


class StreamSource:
    """Base of trusted objects that a sandbox sees as a read-only 1-D stream.

    Only the grader's side encodes these (learner values never do), so the object stays
    with the grader; the sandbox gets a proxy whose every operation comes back here as
    ``stream_request(op, *args)``.
    """

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def dtype(self):
        raise NotImplementedError

    def stream_request(self, op: str, *args):
        raise NotImplementedError


class RemoteFunction:
    """Base of a learner's function that runs elsewhere (the sandbox's proxy subclasses it).

    ``call_measuring_memory`` returns (result, peak bytes the call allocated), as reported from
    where the function really runs: the learner's own process, so evidence, never proof.
    ``note_evidence(check, seen)`` hands such a finding to the instructor's report instead of a verdict.
    """

    def call_measuring_memory(self, *args, **kwargs):
        raise NotImplementedError

    def note_evidence(self, check: str, seen: str) -> None:
        raise NotImplementedError
