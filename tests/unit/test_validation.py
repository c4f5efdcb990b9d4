"""The argument checks themselves (pure functions; the service tests show that a
refused argument writes nothing)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from sqlq_orm import InvalidInput
from sqlq_orm.core import validation as v


def test_names_are_non_empty_bounded_strings():
    assert v.require_name("queue", "mail", 10) == "mail"
    assert v.optional_name("dedupe_key", None, 10) is None
    with pytest.raises(InvalidInput, match="queue is 11 characters; the limit is 10"):
        v.require_name("queue", "x" * 11, 10)


def test_a_long_offending_value_is_shortened_in_the_message():
    with pytest.raises(InvalidInput) as caught:
        v.require_name("type", ["x" * 500], 10)
    assert len(str(caught.value)) < 160 and str(caught.value).endswith("...")


def test_integers_refuse_bools_floats_and_values_out_of_range():
    assert v.require_int("n", 5, minimum=0, maximum=5) == 5
    for bad, message in [(True, "integer, got True"), (1.0, "integer, got 1.0"),
                         (-1, ">= 0, got -1"), (6, "<= 5, got 6")]:  # fmt: skip
        with pytest.raises(InvalidInput, match=message):
            v.require_int("n", bad, minimum=0, maximum=5)


def test_payloads_become_compact_json_and_keep_unicode():
    assert v.encode_payload({"name": "Zoë", "n": [1, 2]}, 100) == '{"name":"Zoë","n":[1,2]}'
    assert v.encode_payload(None, 100) is None


def test_the_payload_cap_counts_utf8_bytes():
    assert v.encode_payload("é" * 10, 22) == '"' + "é" * 10 + '"'
    with pytest.raises(InvalidInput, match="payload is 22 bytes of JSON; the limit is 21"):
        v.encode_payload("é" * 10, 21)


def test_schedule_takes_epoch_seconds_aware_datetimes_or_a_delay():
    moment = datetime(2024, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    assert v.schedule(1_700_000_000, None) == (1_700_000_000, 0)
    assert v.schedule(moment, None) == (int(datetime(2024, 1, 1, 10, tzinfo=UTC).timestamp()), 0)
    assert v.schedule(None, 2.6) == (None, 4)  # ceil, plus the truncated clock's second
    assert v.schedule(None, 0) == (None, 0)  # due now
    assert v.schedule(None, None) == (None, 0)


def test_a_delay_counted_from_a_truncated_clock_never_ends_early():
    # The database's now is the current second truncated: up to 0.999 s behind.
    for delay in (0.001, 1, 1.5, 2, 59.9):
        for fraction in (0.0, 0.5, 0.999):
            real_now = 1_700_000_000 + fraction
            due = 1_700_000_000 + v.schedule(None, delay)[1]
            assert due >= real_now + delay


def test_a_lease_shorter_than_the_minimum_is_refused_naming_it():
    assert v.lease_seconds(2) == 2
    for short in (1, 0, -30):
        with pytest.raises(InvalidInput, match=rf"lease_seconds must be >= 2, got {short}: "):
            v.lease_seconds(short)


def test_run_at_past_year_9999_is_refused():
    with pytest.raises(InvalidInput, match="run_at must be <= 253402300799"):
        v.schedule(10**12, None)


def test_claim_queues_drops_duplicates_and_keeps_order():
    assert v.claim_queues(["b", "a", "b"], 10) == ["b", "a"]
    assert v.claim_queues("mail", 10) == ["mail"]
    assert v.claim_queues(("x",), 10) == ["x"]


def test_claim_limit_is_between_one_and_the_maximum():
    assert v.claim_limit(v.MAX_CLAIM_LIMIT) == v.MAX_CLAIM_LIMIT
    with pytest.raises(InvalidInput, match="limit must be <= 1000, got 1001"):
        v.claim_limit(1001)


def test_app_columns_must_be_ones_the_app_added():
    assert v.app_columns({"tenant": 1}, frozenset({"tenant"})) == {"tenant": 1}
    with pytest.raises(InvalidInput, match=r"unknown job column\(s\) \['b'\].*available: \['a'\]"):
        v.app_columns({"b": 1}, frozenset({"a"}))
    with pytest.raises(InvalidInput, match="available: none"):
        v.app_columns({"b": 1}, frozenset())


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        (1e16, "10000000000000000.0"),
        (-1.5e20, "-150000000000000000000.0"),
        ({"s": '1e+16 "q\\\\" 2e+5', "n": [1e-07, 5]}, None),  # strings, small floats: as is
    ],
)
def test_big_floats_are_spelled_out_and_strings_left_alone(value, spelled):
    text = v.encode_json("payload", value, 10_000, "")

    out = v.plain_big_floats(text)

    assert out == (text if spelled is None else spelled)
    assert json.loads(out) == value and type(json.loads(out)) is type(value)


@pytest.mark.parametrize("text", ['"a\\u0000b"', '{"\\u0000":1}', '["x", "\\\\\\u0000"]'])
def test_nul_escapes_are_refused_for_jsonb(text):
    with pytest.raises(InvalidInput, match="holds the character NUL"):
        v.refuse_nul_in_json("payload", text, "PostgreSQL")


@pytest.mark.parametrize("text", ['"C:\\\\u0000"', '"\\\\\\\\u0000"', '{"u0000": 1}'])
def test_escaped_backslashes_before_u0000_are_not_nul(text):
    assert v.refuse_nul_in_json("payload", text, "PostgreSQL") == text
