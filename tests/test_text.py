"""safe_excerpt: a value from outside becomes one printable, bounded line in a message."""

from ibdiag.text import EXCERPT_CHARS, safe_excerpt


def test_plain_values_are_quoted_unchanged():
    assert safe_excerpt("400 Gb/sec (4X NDR)") == "'400 Gb/sec (4X NDR)'"
    assert safe_excerpt(42) == "'42'"
    assert safe_excerpt("") == "''"


def test_control_characters_and_separators_are_escaped():
    out = safe_excerpt("a\nb\r\x1b[31mred\x7f\x85\u2028\u202e\t\x00")
    assert out == "'a\\x0ab\\x0d\\x1b[31mred\\x7f\\x85\\u2028\\u202e\\x09\\x00'"
    assert out.isprintable()


def test_backslash_is_doubled_so_an_escape_cannot_be_faked():
    assert safe_excerpt("\\x1b") == "'\\\\x1b'"
    assert safe_excerpt("\\x1b") != safe_excerpt("\x1b")


def test_long_values_are_cut_and_the_cut_is_said():
    out = safe_excerpt("9" * 5000)
    assert out == "'" + "9" * EXCERPT_CHARS + "…' (5000 characters)"
    assert safe_excerpt("abcdef", limit=3) == "'abc…' (6 characters)"


def test_bytes_and_non_bmp_characters():
    assert safe_excerpt(b"\xff\x00ok") == "'\\xff\\x00ok'"
    assert safe_excerpt("\U000e0041x") == "'\\U000e0041x'"


def test_unquoted_form_for_error_texts():
    assert safe_excerpt("bad\nline", quote=False) == "bad\\x0aline"
    assert safe_excerpt("abcdef", limit=3, quote=False) == "abc… (6 characters)"


def test_safe_value_quotes_strings_only():
    from ibdiag.text import safe_value

    assert safe_value("x\n") == "'x\\x0a'"
    assert safe_value(4) == "4" and safe_value(float("nan")) == "nan" and safe_value([1, "a"]) == "[1, 'a']"
    assert safe_value(10**100).endswith("(101 characters)")
