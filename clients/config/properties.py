"""Java ``.properties`` files: what Kafka's tools read with ``--command-config FILE``.

Format (``java.util.Properties.load``): one ``key=value`` per logical line; the key ends
at the first unescaped ``=``, ``:`` or white space (``key value`` is valid), white space
around the separator is skipped, the value keeps its trailing white space (as Java
does: a password may end in a space).  Lines whose first non-blank character is ``#``
or ``!`` are comments; blank lines are skipped; a line ending in an odd number of
backslashes continues on the next one (whose leading white space is dropped).  Escapes
in keys and values: ``\\t \\n \\r \\f \\uXXXX``, and a backslash before any other
character stands for that character (``\\=``, ``\\:``, ``\\ ``, ``\\\\``).

Stricter than Java, with the line number in every error
(:class:`~clients.protocol.errors.InvalidConfigError`, ``FILE:LINE: ...``): a line
with a key and no separator nor value (``sasl.mechanism`` alone, Java's empty value,
usually a slip), a key set twice, an empty key, a malformed ``\\u`` escape, and a file
that ends inside a continued line are refused.  Errors name the key, never the value
(values are passwords).  Files are read as UTF-8 (Java's ``load(InputStream)`` reads
ISO-8859-1; UTF-8 files with only ASCII read the same), an unreadable or non-UTF-8 file
is an error naming the file.

Costs: O(file size).  Pure functions: thread-safe.
"""

from __future__ import annotations

from pathlib import Path

from clients.protocol.errors import InvalidConfigError

__all__ = ["parse_properties", "read_properties"]

_BLANK = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_properties(path: str | Path) -> dict[str, str]:
    """The pairs of the properties file at ``path`` (InvalidConfigError naming it)."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise InvalidConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InvalidConfigError(f"{path}: not UTF-8 (byte {exc.start})") from None
    return parse_properties(text, str(path))


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """``text`` in the properties format -> ``{key: value}`` in file order."""
    out: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for number, line in _logical_lines(text, source):
        key, value = _pair(line, f"{source}:{number}")
        if key in out:
            raise InvalidConfigError(f"{source}:{number}: {key!r} is set twice (first on "
                                     f"line {first_line[key]})")
        out[key] = value
        first_line[key] = number
    return out


def _logical_lines(text: str, source: str) -> list[tuple[int, str]]:
    """(number of the first natural line, the logical line) without comments and blanks."""
    out: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            if i >= len(lines):
                raise InvalidConfigError(f"{source}:{start + 1}: the file ends inside a "
                                         "line continued with '\\'")
            line = line[:-1] + lines[i].lstrip(_BLANK)
            i += 1
        out.append((start + 1, line))
    return out


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _pair(line: str, where: str) -> tuple[str, str]:
    """A logical line -> (key, value), both unescaped."""
    i, n = 0, len(line)
    while i < n and line[i] not in "=:" and line[i] not in _BLANK:
        i += 2 if line[i] == "\\" else 1
    raw_key = line[:min(i, n)]
    j = i
    while j < n and line[j] in _BLANK:
        j += 1
    separated = j < n and line[j] in "=:"
    if separated:
        j += 1
        while j < n and line[j] in _BLANK:
            j += 1
    key = _unescape(raw_key, where)
    if not key:
        raise InvalidConfigError(f"{where}: a line with no key (expected KEY=VALUE)")
    if not separated and j >= n:
        raise InvalidConfigError(f"{where}: {key!r} has no '=' and no value "
                                 "(expected KEY=VALUE)")
    return key, _unescape(line[j:], where, key)


def _unescape(text: str, where: str, key: str | None = None) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                what = "the key" if key is None else f"the value of {key!r}"
                raise InvalidConfigError(f"{where}: malformed \\uXXXX escape in {what}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)
