"""README.md's Python examples run as written (the blocks between the
"python example" and "gpu example" markers)."""

import pathlib
import re

import pytest

import tandem

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def example(name):
    text = README.read_text()
    m = re.search(rf"<!-- {name} begin -->\n```python\n(.*?)```\n<!-- {name} end -->", text, re.S)
    assert m, f"README.md has no {name} between the markers"
    return compile(m.group(1), f"{README}:{name}", "exec")


def test_readme_python_example_runs():
    pytest.importorskip("ray")
    exec(example("python example"), {"__name__": "readme_example"})


def test_readme_gpu_example_runs():
    code = example("gpu example")  # present whether or not it can run here
    pytest.importorskip("cupy", reason="cupy is not installed")
    try:
        tandem.Index(device="gpu").close()
    except tandem.Error as e:
        pytest.skip(f"no usable GPU: {e}")
    exec(code, {"__name__": "readme_gpu_example"})
