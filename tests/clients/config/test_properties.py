"""Java properties files (clients/config/properties.py): Java's grammar, and strict
errors with the line number that never show a value."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.config.properties import parse_properties, read_properties
from clients.protocol.errors import InvalidConfigError


def test_java_grammar_comments_separators_continuations_and_escapes() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   \t\n"
        "security.protocol=SASL_SSL\n"
        "  sasl.mechanism : SCRAM-SHA-512\n"
        "client.id cli-7\n"  # white space alone separates, as in Java
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        "      username=\"alice\" \\\n"
        "      password=\"x\";\n"
        "sasl.password=ends with a space \n"  # Java keeps trailing white space
        "empty=\n"
        "path\\=with\\:escapes=tab\\there \\u00e9\\\\\n"
        "odd=two backslashes \\\\\n"
        "next=after\n"
    )
    assert parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.id": "cli-7",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                            'required username="alice" password="x";',
        "sasl.password": "ends with a space ",
        "empty": "",
        "path=with:escapes": "tab\there \u00e9\\",
        "odd": "two backslashes \\",
        "next": "after",
    }


@pytest.mark.parametrize(("text", "message"), [
    ("a=1\nsasl.mechanism\n", r"client\.properties:2: 'sasl\.mechanism' has no '=' and no value"),
    ("a=1\n\n# c\na=2\n", r"client\.properties:4: 'a' is set twice \(first on line 1\)"),
    ("=value\n", r"client\.properties:1: a line with no key"),
    ("ok=1\nsasl.password=se\\u12cret\n",
     r"client\.properties:2: malformed \\uXXXX escape in the value of 'sasl\.password'"),
    ("ok=1\nsasl.password=secret \\\n", r"client\.properties:2: the file ends inside a line"),
])
def test_strict_errors_name_the_line_and_never_the_value(text: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message) as caught:
        parse_properties(text, "client.properties")
    assert "se" + "cret" not in str(caught.value)


def test_files_are_read_as_utf8_and_unreadable_ones_named(tmp_path: Path) -> None:
    good = tmp_path / "client.properties"
    good.write_text("sasl.username=jos\u00e9\n", encoding="utf-8")
    assert read_properties(good) == {"sasl.username": "jos\u00e9"}
    with pytest.raises(InvalidConfigError, match=r"cannot read .*missing\.properties"):
        read_properties(tmp_path / "missing.properties")
    latin = tmp_path / "latin.properties"
    latin.write_bytes(b"sasl.password=\xe9\n")
    with pytest.raises(InvalidConfigError, match=r"latin\.properties: not UTF-8"):
        read_properties(latin)
