"""Error codes are CATEGORY:SUBCATEGORY; error details are short summaries."""

from __future__ import annotations

import pytest

from sqlq_orm import InvalidInput
from sqlq_orm.core.error_codes import TRUNCATION_MARK, normalize_error_code, summarize_detail


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("TIMEOUT:UPSTREAM_API", "TIMEOUT:UPSTREAM_API"),
        ("timeout:upstream_api", "TIMEOUT:UPSTREAM_API"),
        ("  timeout : upstream-api ", "TIMEOUT:UPSTREAM_API"),
        ("dependency:db.locked", "DEPENDENCY:DB_LOCKED"),
        ("Resource:Out Of  Memory", "RESOURCE:OUT_OF_MEMORY"),
        ("HTTP:E503", "HTTP:E503"),
    ],
)
def test_forgivable_spellings_are_normalised(given, stored):
    assert normalize_error_code(given) == stored


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("TIMEOUT", "one colon"),
        ("A:B:C", "one colon"),
        ("", "one colon"),
        (":X", "letters, digits and underscores"),
        ("X:", "letters, digits and underscores"),
        ("1X:Y", "starting with a letter"),
        ("X:_Y", "starting with a letter"),
        ("TIME/OUT:X", "letters, digits and underscores"),
        ("ÜBER:X", "letters, digits and underscores"),
        (42, "must be a string"),
        (None, "must be a string"),
        ("A:" + "B" * 120, "the limit is 100"),
    ],
)
def test_malformed_codes_are_refused_naming_the_value(given, message):
    with pytest.raises(InvalidInput, match=message) as caught:
        normalize_error_code(given)
    assert repr(given)[:40] in str(caught.value)


def test_a_short_detail_is_kept_but_trimmed():
    assert summarize_detail("  connection reset \n") == "connection reset"


def test_none_stays_none_and_other_objects_become_text():
    assert summarize_detail(None) is None
    assert summarize_detail(ValueError("bad row 7")) == "bad row 7"


def test_a_long_detail_is_cut_to_the_limit_with_a_mark():
    summary = summarize_detail("x" * 5000)
    assert len(summary) == 500 and summary.endswith(TRUNCATION_MARK)
    assert summarize_detail("y" * 500) == "y" * 500


def test_the_limit_can_be_lowered():
    assert summarize_detail("abcdefghij", limit=5) == "abcd" + TRUNCATION_MARK
