"""scripts/check_structure.py, on small workspaces made here: it must fail on each broken
target (untyped errors, a long function, a module cycle) and only on those, and read past
what looks like code but is not (strings, chars, comments, test-only code). A failure here
means the structure gate in scripts/test.sh no longer guards what it claims to."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_structure.py"


def check(root: Path) -> tuple[int, str]:
    r = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True,
                       text=True, timeout=60, check=False)
    return r.returncode, r.stderr


def crate(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "crates" / "c" / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def body(lines: int) -> str:
    """A function of exactly `lines` physical lines, with braces in a string, a char and a
    comment that must not end it early."""
    inner = ['    let s = "}}}";', "    let c = '}';", "    // }"]
    inner += ["    let _ = 1;"] * (lines - 2 - len(inner))
    return "fn long() {\n" + "\n".join(inner) + "\n}\n"


def test_a_clean_crate_passes(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod a;\nmod b;\n" + body(120),
        "a.rs": "use crate::b::x;\npub fn y() -> Result<(), String> { x() }\n",
        "b.rs": "pub fn x() -> Result<(), String> { Ok(()) }\n",
    })
    assert check(root) == (0, "")


def test_a_function_over_120_lines_fails_naming_it(tmp_path):
    root = crate(tmp_path, {"lib.rs": body(121)})
    rc, err = check(root)
    assert rc == 1 and "`long` is 121 lines" in err, err


def test_test_code_is_not_counted(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "#[cfg(test)]\nmod tests {\n" + body(300) + "}\n#[cfg(test)]\nmod big;\n",
        "big.rs": body(300) + "fn e() -> Result<u8, String> { Ok(1) }\n" * 9,
    })
    assert check(root) == (0, "")


def test_more_than_five_string_errors_fail(tmp_path):
    fns = "".join(f"pub fn f{i}() -> Result<u8, String> {{ Ok(1) }}\n" for i in range(6))
    rc, err = check(crate(tmp_path, {"lib.rs": fns}))
    assert rc == 1 and "6 `Result<_, String>`" in err, err


def test_a_module_cycle_fails_naming_its_modules(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod a;\nmod b;\nmod d;\n",
        "a.rs": "use crate::b::x;\npub fn y() { x() }\n",
        "b.rs": "pub fn x() { crate::a::y() }\n",
        "d.rs": "use crate::{a, b};\n",
    })
    rc, err = check(root)
    assert rc == 1 and "modules a, b use each other in a cycle" in err, err
