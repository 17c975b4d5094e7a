"""What the command line says when something is wrong: a usage mistake, or one line for an
error it cannot fix by itself (what went wrong, where, and what to do)."""

from __future__ import annotations

from provider.domain.cloud import CloudError, OutcomeUnknown, TransientError


class UsageError(Exception):
    """Bad command-line input: printed, exit code 1."""


_AUTH_WORDS = ("credentials", "AuthFailure", "UnauthorizedOperation", "ExpiredToken",
               "InvalidClientTokenId", "SignatureDoesNotMatch", "AccessDenied",
               "PERMISSION_DENIED", "UNAUTHENTICATED", "Forbidden")


def cloud_error_line(err: CloudError) -> str:
    """The cloud refused or did not answer a call the command needed."""
    text = " ".join(str(err).split())
    if any(word.lower() in text.lower() for word in _AUTH_WORDS):
        hint = ("check allset's cloud identity and permissions (docs/operator-guide.md, "
                "\"Give allset a cloud identity\")")
    elif isinstance(err, TransientError | OutcomeUnknown):
        hint = "the cloud's API did not answer; check network access to it and try again"
    else:
        hint = "check the config's cloud section and node groups against the cloud"
    return f"cloud call failed: {text}; {hint}"
