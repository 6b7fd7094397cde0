"""The docs ship with the product and stay in step with the code (issue 8 item 6)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pydantic import BaseModel

from api import schemas
from sink.config import add_serve_arguments

ROOT = Path(__file__).parent.parent
CONTRACT = ROOT / "docs" / "contract.md"


def wire_fields(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_readme_points_at_the_contract_in_the_repository() -> None:
    """The README links docs/contract.md, which exists; no pointer to a file outside the repo."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/contract.md" in readme and CONTRACT.is_file()
    assert "`CONTRACT.md`" not in readme


def test_contract_names_every_field_of_the_answers() -> None:
    """Every field of the envelope, the create answer and read_message is in docs/contract.md."""
    text = CONTRACT.read_text(encoding="utf-8")
    for model in (schemas.CreatedOut, schemas.MessageOut, schemas.MessageListItem):
        for name in wire_fields(model) - {"size", "claimed", "inbox_id"}:
            assert re.search(rf"[`\"]{re.escape(name)}[`\"]", text), (model.__name__, name)


def test_readme_configuration_lists_every_serve_flag() -> None:
    """Each `runsink serve` flag has a row in the README's configuration table."""
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Configuration") :]
    for action in parser._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}" in table, flag
