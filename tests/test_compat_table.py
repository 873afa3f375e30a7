"""README's generated sections (server/compat.py) match the registries, and the words the
parameter table uses for each parameter's values match what its validator accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ebbdb.server import compat
from ebbdb.server.config import build_parser
from ebbdb.server.config_file import OPTIONS as CONFIG_FILE_OPTIONS
from ebbdb.server.errors import CommandError
from ebbdb.server.parameters import PARAMETERS

README = Path(__file__).resolve().parents[1] / "README.md"
FIX = "README is stale: regenerate it with server/compat.py (--write README.md) and commit it"


def _section(text: str, name: str) -> str:
    begin, end = compat.markers(name)
    assert begin in text and end in text, f"README lacks the {name!r} markers"
    return text.split(begin + "\n", 1)[1].split(end, 1)[0]


@pytest.mark.parametrize("name", sorted(compat.SECTIONS))
def test_readme_section_is_current(name: str) -> None:
    assert _section(README.read_text(encoding="utf-8"), name) == compat.SECTIONS[name]() + "\n", FIX


def test_check_fails_on_a_stale_copy(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    fresh = tmp_path / "README.md"
    fresh.write_text(text, encoding="utf-8")
    assert compat.main(["--check", str(fresh)]) == 0
    stale = tmp_path / "STALE.md"
    stale.write_text(text.replace("| `ping` |", "| `pong` |", 1), encoding="utf-8")
    assert compat.main(["--check", str(stale)]) == 1
    assert compat.main(["--write", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == text


def test_write_refuses_a_readme_without_markers(tmp_path: Path) -> None:
    bare = tmp_path / "README.md"
    bare.write_text("# nothing generated here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="compatibility begin"):
        compat.main(["--write", str(bare)])


def test_every_parameter_is_described() -> None:
    assert set(compat.PARAMETER_VALUES) == set(PARAMETERS)
    assert set(compat.PARAMETER_NOTES) == set(PARAMETERS)


def _accepts(name: str, value: object) -> bool:
    try:
        PARAMETERS[name].validate(value)
    except CommandError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_parameter_values_are_what_the_validator_accepts(name: str) -> None:
    kind, low, high = compat.PARAMETER_VALUES[name]
    if kind == "boolean":
        assert _accepts(name, True) and _accepts(name, False)
        assert not _accepts(name, "yes")
        return
    assert low is not None
    assert _accepts(name, low)
    assert not _accepts(name, low - 1)
    assert _accepts(name, low + 1)
    assert _accepts(name, low + 0.5) is (kind == "number")
    if high is None:
        assert _accepts(name, 2**40)
    else:
        assert _accepts(name, high)
        assert not _accepts(name, high + 1)
    assert _accepts(name, PARAMETERS[name].default)


def test_readme_names_every_flag_and_config_file_option() -> None:
    text = README.read_text(encoding="utf-8")
    flags = set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", build_parser().format_help()))
    missing = sorted(f for f in flags if f"`{f}" not in text)
    assert not missing, f"README's Command line table lacks {missing}"
    yaml_block = text.split("### Config file", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    leaves = {path.rsplit(".", 1)[1] for path in CONFIG_FILE_OPTIONS}
    missing = sorted(leaf for leaf in leaves if f"{leaf}:" not in yaml_block)
    assert not missing, f"README's config file example lacks {missing}"
