"""Text from a database, a file or a device shown as data: control characters escaped.

A stored cell can hold anything, an ESC sequence that retitles the terminal or clears the
screen among it. Every surface that prints stored text to a terminal or a log (``show``,
``export --format csv``, ``warm``'s table, error messages, the ``autotune`` loggers) passes it
through :func:`printable`; ``report`` escapes HTML instead, and JSON exports keep values exact
(JSON itself writes control characters as ``\\u`` escapes).
"""

from __future__ import annotations

import logging
import re

#: C0 controls, DEL and C1 controls (U+0080 to U+009F, which some terminals obey as ESC [ ...).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable(value: object, keep: str = "") -> str:
    """``value`` as text with every control character (but those in ``keep``) written as an
    escape: ``\\x1b``, ``\\n``, ``\\x9b``. Other text, backslashes included, is unchanged."""
    text = value if isinstance(value, str) else str(value)
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)


class PrintableFilter(logging.Filter):
    """Escapes control characters in a log record's message (line breaks and tabs kept: they
    are the message's own layout), so text from a database cannot drive the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        escaped = printable(message, keep="\n\t")
        if escaped != message:
            record.msg, record.args = escaped, None
        return True


def guard_logger(name: str) -> logging.Logger:
    """The logger ``name``, with :class:`PrintableFilter` added once."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, PrintableFilter) for f in logger.filters):
        logger.addFilter(PrintableFilter())
    return logger
