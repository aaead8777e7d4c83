"""The one reader of JSON from outside: one set of checks, one error type, one printable rule."""

from __future__ import annotations

import pytest

from ibdiag.errors import InputError
from ibdiag.jsonread import Fields, JsonFieldError, JsonReader, check_text
from ibdiag.text import is_printable


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("mlx5_0", True),
        ("a\tb", True),  # log lines carry tabs
        ("naïve 10\u00a0GB", True),  # letters and no-break spaces are printable
        ("x\x1b[2J", False),  # an escape sequence
        ("two\nlines", False),
        ("abc\u202edef", False),  # a bidirectional override (Cf)
        ("zero\u200bwidth", False),  # a zero-width space (Cf)
        ("para\u2029graph", False),  # a paragraph separator (Zp)
        ("del\x7f", False),
        ("c1\x9b", False),
    ],
)
def test_one_printable_rule(text, ok):
    assert is_printable(text) is ok
    if ok:
        assert check_text(text, "f") == text
    else:
        with pytest.raises(JsonFieldError, match="^f: holds control or non-printable characters$"):
            check_text(text, "f")


def test_fields_and_reader_share_the_checks_and_the_wording():
    """A bench result read by key and a report input walked by path say the same problem the same way."""
    doc = {"world_size": 0, "host": "n\x1b", "rows": "no"}
    f = Fields(doc, "")
    with pytest.raises(JsonFieldError) as by_key:
        f.integer("world_size", 1, 64)
    with pytest.raises(InputError) as by_path:
        JsonReader("x.json").integer(doc["world_size"], "world_size", lo=1, hi=64)
    assert str(by_key.value) == "world_size: 0 is outside 1..64"
    assert by_path.value.message == "x.json: world_size: 0 is outside 1..64"
    with pytest.raises(JsonFieldError, match="^host: holds control"):
        f.text("host")
    with pytest.raises(JsonFieldError, match="^rows: must be a list$"):
        f.items("rows")
    with pytest.raises(JsonFieldError, match=r"^results\[3\]\.bytes: is missing$"):
        Fields({}, "results[3]").integer("bytes", required=True)


def test_a_json_field_error_is_a_value_error():
    """Callers that turned a ValueError into an InputError with their hint still do."""
    assert issubclass(JsonFieldError, ValueError)
    with pytest.raises(ValueError, match="document: must be an object"):
        Fields([1, 2], "")
