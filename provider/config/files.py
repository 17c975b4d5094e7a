"""Reading the files a person hands allset (config, request, trace): bounded in size and
UTF-8, so a wrong file is one line that names it, not a traceback or a minute of parsing."""

from __future__ import annotations

from pathlib import Path

from provider.config.errors import ConfigError

MIB = 1024 * 1024
# A config of a thousand node groups is well under 1 MiB; a 50 MiB one took a minute to
# reject as YAML (issue 15). Traces are larger: a generated week of 2,300 jobs is ~300 KiB.
CONFIG_LIMIT = 8 * MIB
TRACE_LIMIT = 256 * MIB


def read_text(path: str | Path, what: str, limit: int = CONFIG_LIMIT) -> str:
    """The file's text; ConfigError naming the file if it cannot be read, is larger than
    ``limit`` bytes, or is not UTF-8."""
    source = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise ConfigError(source, [("", f"cannot read {what}: {err.strerror}")]) from err
    if len(data) > limit:
        raise ConfigError(source, [("", f"{what} is larger than {limit // MIB} MiB; is it "
                                        "the right file?")])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(source, [("", f"{what} is not UTF-8 text (byte 0x{data[err.start]:02x} "
                                        f"at offset {err.start})")]) from err
