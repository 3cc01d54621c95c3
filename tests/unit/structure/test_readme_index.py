"""The README is an index (issue 32 #7): every docs/*.md has one line in its docs index, every
top-level directory and file of the repository is in its layout, and the test command is `make test`."""
from __future__ import annotations

import re
import subprocess

from kiln_paths import REPO
README = (REPO / "README.md").read_text()
# Not the repository's own: build output, caches, run results (.gitignore) -- used only outside git.
NOT_OURS = {".git", ".venv", ".cache", "__pycache__", ".pytest_cache", ".hypothesis", ".ansible", "results"}
# Top-level files that are tool configuration or this file, not layout.
DOTFILES = {".gitignore", ".yamllint", ".ansible-lint", "README.md"}


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_docs_index_has_one_line_per_docs_file():
    index = _section("Documentation")
    listed = re.findall(r"^\| \[docs/([^\]]+\.md)\]\(docs/\1\) \|", index, flags=re.M)
    on_disk = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert sorted(listed) == on_disk, "list each docs/*.md once in the README's docs index"
    assert len(listed) == len(set(listed))


def test_layout_names_every_top_level_directory_and_file():
    layout = _section("Layout").split("```", 2)[1]
    names = {line.split()[0].rstrip("/").split("/")[0] for line in layout.splitlines() if line and not line[0].isspace()}
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=False)
    if tracked.returncode == 0 and tracked.stdout:
        top = {path.split("/", 1)[0] for path in tracked.stdout.splitlines()} - DOTFILES
    else:  # an exported tree: what is there, less caches and run output
        top = {p.name for p in REPO.iterdir() if p.name not in NOT_OURS and p.name not in DOTFILES}
    assert {"bench", "callback_plugins", "docs", "tools", ".ci", ".config"} <= top
    assert top - names == set(), "add to the README's layout"


def test_readme_is_an_index_not_a_manual():
    assert len(README.splitlines()) <= 170
    # the layout comes after the commands, real hosts and the index, and nothing comes after it
    assert README.index("## The two commands") < README.index("## Real hosts") < README.index("## Documentation") \
        < README.index("## Layout")
    assert _section("Layout").rstrip().endswith("```")


def test_the_test_command_is_make_test():
    commands = _section("The two commands")
    assert re.search(r"^make test\b", commands, flags=re.M)
    assert "exec make test" in (REPO / ".ci" / "run").read_text()


def test_real_site_commands_name_their_inventory():
    # the root ansible.cfg names no inventory: every playbook command in the README passes -i
    blocks = re.findall(r"^```sh\n(.*?)^```", README, flags=re.M | re.S)
    lines = [line for block in blocks for line in block.splitlines() if re.search(r"(ansible-playbook|kiln-burnin) ", line)]
    assert len(lines) >= 6
    for line in lines:
        assert "-i inventories/" in line, line
