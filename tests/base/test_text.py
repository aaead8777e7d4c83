"""ibdiag.text.safe_excerpt: outside text made safe for one log line or terminal line."""

from __future__ import annotations

from ibdiag.text import safe_excerpt


def test_control_and_format_characters_are_escaped():
    assert safe_excerpt("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert safe_excerpt("\x1b[31mred\x07") == "\\x1b[31mred\\x07"
    assert safe_excerpt("x\u202ey\u200bz\x85") == "x\\u202ey\\u200bz\\x85"
    assert (
        safe_excerpt("back\\slash") == "back\\\\slash"
    )  # an escape in the output always means an escaped character


def test_printable_text_is_kept():
    assert (
        safe_excerpt("node-a.example (ibdiag 0.1.0) µs ² 日本")
        == "node-a.example (ibdiag 0.1.0) µs ² 日本"
    )


def test_bytes_and_other_values():
    assert safe_excerpt(b"ok\xff\xfe") == "ok\\xff\\xfe"
    assert safe_excerpt(2**70) == str(2**70)
    assert safe_excerpt(None) == "None"


def test_long_text_is_capped_with_a_note():
    out = safe_excerpt("A" * 60_000, 100)
    assert out == "A" * 100 + "… (59900 more characters)"
    escaped = safe_excerpt("\n" * 100, 10)
    assert escaped == "\\n" * 5 + "… (95 more characters)"
    assert safe_excerpt("abc", 3) == "abc" and safe_excerpt("abcd", 3) == "abc… (1 more character)"


def test_safe_value_quotes_strings_and_shows_numbers_as_numbers():
    from ibdiag.text import safe_value

    assert safe_value("mlx5_\n0") == "'mlx5_\\n0'"
    assert (
        safe_value(4) == "4"
        and safe_value(float("nan")) == "nan"
        and safe_value([1, "a"]) == "[1, 'a']"
    )
    assert safe_value("x" * 100, 10) == "'" + "x" * 10 + "… (90 more characters)'"


def test_safe_path_cuts_a_long_path_in_its_middle_never_the_file_name():
    from ibdiag.text import safe_path

    long_dir = "/tmp/pytest-of-root/pytest-310/test_a_link_in_a_dump_director1/d"
    shown = safe_path(f"{long_dir}/saquery.out")
    assert shown.startswith("'/tmp/pytest-of-root/") and shown.endswith("…/saquery.out'")
    assert len(shown) <= 64 + 2
    assert safe_path("net.txt") == "'net.txt'" and safe_path("/a/b.json") == "'/a/b.json'"
    # escaped like any value, in the directories and in the name
    assert safe_path("/tmp/a\x1bb/n\x1b.json") == "'/tmp/a\\x1bb/n\\x1b.json'"
    assert safe_path("/x/" + "\u202e" * 40 + "/n").endswith("…/n'")
    # a name longer than the limit alone is cut at its end, as any value
    assert safe_path("/d/" + "y" * 70, 64) == "'…/" + "y" * 64 + "… (6 more characters)'"
