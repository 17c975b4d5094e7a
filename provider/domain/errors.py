"""Domain errors the edges translate (gRPC status codes, CLI exit codes)."""


class DomainError(Exception):
    """Base: the request was refused and nothing changed."""


class NotFound(DomainError):
    pass


class InvalidArgument(DomainError):
    pass


class FailedPrecondition(DomainError):
    pass


class Unavailable(DomainError):
    """The service is draining (shutting down); try again on the next replica."""
