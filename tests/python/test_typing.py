"""The package's annotations and stubs, checked by mypy: a typed example
(typed_example.py) passes, and calls a reader would get wrong are rejected
(a str key, an array where one key is typed)."""

import os
import pathlib
import subprocess
import sys

import pytest

import tandem

HERE = pathlib.Path(__file__).resolve().parent


def mypy(tmp_path, *files):
    pytest.importorskip("mypy", reason="mypy is not installed (the python preset installs it from "
                                       "python/requirements-test.txt)")
    env = dict(os.environ)
    package_root = pathlib.Path(tandem.__file__).resolve().parents[1]
    if "site-packages" not in package_root.parts and "dist-packages" not in package_root.parts:
        env["MYPYPATH"] = str(package_root)  # the source tree (PYTHONPATH), not an installed copy
    cmd = [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary",
           "--cache-dir", str(tmp_path / "mypy-cache"), *map(str, files)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)


def test_the_typed_example_passes_mypy(tmp_path):
    done = mypy(tmp_path, HERE / "typed_example.py")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_rejects_wrong_calls(tmp_path):
    bad = tmp_path / "bad_example.py"
    bad.write_text(
        "import numpy as np\n"
        "import tandem\n"
        "idx = tandem.Index()\n"
        "idx.get('x')\n"                                         # line 4: a str key
        "v: int = idx.get(np.arange(3, dtype=np.uint64))[0]\n"   # line 5: an array gives arrays
        "w: int = idx.get(5)\n"                                  # line 6: one key may give None
        "tandem.Batch().scan(0, 'z')\n"                          # line 7
    )
    done = mypy(tmp_path, bad)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {int(line.split(":")[1]) for line in done.stdout.splitlines() if ": error:" in line}
    assert lines == {4, 5, 6, 7}, done.stdout
