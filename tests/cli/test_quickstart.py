"""The README's demo quickstart, run as written: its command in a fresh $HOME, then the lines it prints to
paste, then `inorder status` in that shell. The commands come from README.md itself, so the test breaks when
the README changes what a reader runs. The demo's home is under tmp (INORDER_DEMO_HOME, as the README says),
and it generates 2,000 events (the script's EVENTS) rather than 50,000, to stay quick."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from pipelines.spark.class_archive import cache_dir
from tests.command import REPO, clean_environment


def demo_quickstart() -> tuple[str, list[str]]:
    """The README's demo paragraph: its bash block, and the lines it says the demo ends with (`…` stands for
    what the demo fills in)."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("**Demo, end to end.**"):]
    section = section[:section.index("\n**", 1)]
    (block,) = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)
    to_paste = re.search(r"the two lines to paste[^(]*\((.*?)\)", section, re.S).group(1)
    return block, re.findall(r"`([^`]+)`", to_paste)


def shell(script: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    """`script` in bash from the repository's root, as a user with a fresh $HOME, no venv activated and no inorder
    variables (but the tests' quick JVM)."""
    clean = {k: v for k, v in clean_environment(as_a_user=True).items() if not k.startswith("VIRTUAL_ENV")}
    # the machine's cache, where the set-up recorded Spark's classes (a fresh $HOME's set-up would take 40 s again)
    clean.setdefault("XDG_CACHE_HOME", str(cache_dir().parent))
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env={**clean, "HOME": str(home), **env},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_the_readmes_demo_quickstart_runs_as_written(tmp_path):
    block, promised = demo_quickstart()
    assert block.strip() == "./scripts/demo.sh" and len(promised) == 2
    home, demo_home = tmp_path / "home", tmp_path / "demo"
    home.mkdir()
    demo = shell(block, home, INORDER_DEMO_HOME=str(demo_home), EVENTS="2000")

    # it ends with the two lines the README promises, naming the demo's own home
    printed = demo.stdout.rstrip("\n").splitlines()
    pasted = printed[-2:]
    for line, pattern in zip(pasted, promised):
        assert re.fullmatch(".+".join(map(re.escape, pattern.split("…"))), line), (line, pattern)
    assert f"INORDER_HOME={demo_home} " in pasted[1] and (demo_home / "store.duckdb").exists()

    # every check of its three runs is green (runs given past logical times included), as its closing word
    # on checks says: nothing in the bank demo is red or yellow on purpose
    verdicts = re.findall(r"; checks: (\d+) of (\d+) passed(.*)$", demo.stdout, re.M)
    assert len(verdicts) == 3 and all(passed == of and not rest for passed, of, rest in verdicts), verdicts
    assert "--- checks: none is red or yellow on purpose" in demo.stdout

    # pasted into a shell, they reach the demo's store: `inorder status` there prints the summary the demo did
    status = shell("\n".join([*pasted, "inorder status"]), home)
    summary = demo.stdout[demo.stdout.index("--- summary\n") + len("--- summary\n"):
                          demo.stdout.index("--- newest errors")]
    assert status.stdout == summary
    for view in ("accounts", "account_activity", "daily_totals"):
        assert view in status.stdout
