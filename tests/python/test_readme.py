"""README.md's Python example runs as written (the block between the
"python example" markers)."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs():
    pytest.importorskip("ray")
    text = README.read_text()
    m = re.search(r"<!-- python example begin -->\n```python\n(.*?)```\n<!-- python example end -->", text, re.S)
    assert m, "README.md has no python example between the markers"
    exec(compile(m.group(1), str(README) + ":python example", "exec"), {"__name__": "readme_example"})
