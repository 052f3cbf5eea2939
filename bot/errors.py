"""The exception tree. User errors carry a message fit to show as-is (CLI, Slack).

    DoctorError                      base of everything we raise on purpose
    ├── UserInputError               bad paste / argument; message says what to do
    │   ├── EmptyInput
    │   ├── InputTooLarge
    │   ├── BinaryInput
    │   ├── InvalidCase              a new/edited KB case fails the schema or the KB rules (per field)
    │   ├── ReviewConflict           a KB submission was already decided, or is not in that state
    │   └── InvalidTarget            a diagnose target that is not a plain host/group name (metacharacters…)
    ├── ConfigError                  a setting or settings file is wrong
    ├── IndexUnavailable             the search index could not be loaded or built
    ├── LLMUnavailable               the explaining LLM is down, slow or answered nonsense
    ├── PermissionDenied             chat user/channel may not do this
    └── RunnerError                  remote checks could not run on a host
        ├── UnknownHost
        ├── HostUnreachable
        ├── AuthFailed
        └── HostKeyMismatch

kb.KBError (a bad case file) lives with the KB, which imports nothing of ours.
"""


class DoctorError(Exception):
    """Base class. `str(exc)` is a one-line message safe to show to the user."""


class UserInputError(DoctorError):
    pass


class EmptyInput(UserInputError):
    pass


class InputTooLarge(UserInputError):
    pass


class BinaryInput(UserInputError):
    pass


class InvalidCase(UserInputError):
    """`problems` maps a field name ("title", "signatures", "examples", …) to what is wrong with it."""

    def __init__(self, problems: dict[str, str], where: str = "case"):
        self.problems = dict(problems)
        self.where = where
        super().__init__(f"{where}: " + "; ".join(f"field '{k}': {v}" for k, v in self.problems.items()))


class ReviewConflict(UserInputError):
    pass


class InvalidTarget(UserInputError):
    pass


class ConfigError(DoctorError):
    pass


class IndexUnavailable(DoctorError):
    pass


class LLMUnavailable(DoctorError):
    """`kind` says which fault, for tests, metrics and the circuit breaker: connection, timeout, stalled,
    server_error, prompt_too_long, unknown_model, auth, overloaded, bad_request, bad_response,
    unsupported, circuit_open."""

    def __init__(self, message: str, kind: str = "unavailable"):
        super().__init__(message)
        self.kind = kind


class PermissionDenied(DoctorError):
    pass


class RunnerError(DoctorError):
    pass


class UnknownHost(RunnerError):
    pass


class HostUnreachable(RunnerError):
    pass


class AuthFailed(RunnerError):
    pass


class HostKeyMismatch(RunnerError):
    pass
