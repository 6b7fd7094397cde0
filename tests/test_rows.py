from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from sink.storage.rows import json_strings


@given(st.lists(st.text(st.characters(exclude_categories=())), max_size=5))
def test_json_strings_is_json_dumps_of_the_list(values: list[str]) -> None:
    """json_strings gives json.dumps's very text for any strings, lone surrogates included."""
    assert json_strings(values) == json.dumps(values)
    assert json_strings(tuple(values)) == json.dumps(values)
