"""The status document's one profile filter, shared by the daemon's ``status NAME`` and the CLI."""

from __future__ import annotations

from supervisor.core.fleet.status_doc import only_profile, profiles_of

DOC = {"schema": 1, "daemon": {"pid": 1}, "profiles": [{"name": "a"}, {"name": "b"}, "junk", None]}


def test_only_the_named_profile_is_kept_and_the_rest_of_the_document_stays() -> None:
    doc = only_profile(DOC, "b")
    assert doc["profiles"] == [{"name": "b"}]
    assert doc["daemon"] == {"pid": 1}
    assert doc["schema"] == 1


def test_no_name_keeps_every_profile_entry_but_not_junk() -> None:
    assert profiles_of(DOC) == [{"name": "a"}, {"name": "b"}]
    assert only_profile(DOC, None)["profiles"] == [{"name": "a"}, {"name": "b"}]


def test_an_unknown_name_or_a_malformed_document_gives_no_profile() -> None:
    assert profiles_of(DOC, "c") == []
    assert profiles_of({"profiles": "x"}) == []
    assert profiles_of({}) == []
