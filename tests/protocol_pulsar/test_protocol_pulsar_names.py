"""Topic names have one home (`protocols.pulsar.TopicName`): every package that turns a name into
a managed-ledger name, an admin REST path or back agrees with it, for any local name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.cli.cmd_admin import topic_path
from protocols.pulsar import InvalidTopicNameError, TopicName
from retention import ml_name_of, topic_of
from sinks.spark._admin import persistent_topic

# local names as users write them: may hold '/', '%', spaces and non-ASCII, never NUL or newline
local_names = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n"), min_size=1, max_size=40
).filter(lambda s: s not in (".", "..") and not s.startswith("/"))


@given(local_names)
def test_managed_ledger_name_round_trips(local: str) -> None:
    try:
        topic = TopicName.parse(f"persistent://t/ns/{local}")
    except InvalidTopicNameError:
        return  # e.g. "x-partition-0" of an invalid base: refused, nothing to round-trip
    ml = topic.managed_ledger_name
    assert ml.count("/") == 3  # the local name is one path component
    assert TopicName.from_managed_ledger_name(ml) == topic
    # retention names the same managed ledger as the broker, both ways
    assert ml_name_of(str(topic)) == ml
    assert topic_of(ml) == str(topic)


def test_cli_and_spark_paths_agree_with_the_broker() -> None:
    name = "persistent://t/ns/a/b c%d"
    topic = TopicName.parse(name)
    assert topic_path(name) == f"t/ns/{topic.encoded_local_name}" == "t/ns/a%2Fb%20c%25d"
    assert persistent_topic("t/ns/a/b c%d") == topic
    assert persistent_topic("x") == TopicName.parse("persistent://public/default/x")
    with pytest.raises(ValueError, match="only persistent"):
        persistent_topic("non-persistent://t/ns/x")


@pytest.mark.parametrize(
    "bad",
    ["t/ns/x", "t/ns/persistent/", "t/ns/queue/x", "t/ns/persistent/a/b", "t/ns/persistent/..", "t//persistent/x"],
)
def test_invalid_managed_ledger_names(bad: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.from_managed_ledger_name(bad)
