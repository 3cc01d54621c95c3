"""Generated role docs (tests/harness/role_docs.py): docs/architecture.md's role table lists every
role from its spec, says which are internal, and `--check` fails when it is stale (issue 32 #5)."""
from __future__ import annotations

import importlib.util
import shutil

import pytest
import yaml

from kiln_paths import REPO
ROLES = REPO / "roles"

_spec = importlib.util.spec_from_file_location("kiln_role_docs", REPO / "tests" / "harness" / "role_docs.py")
role_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_docs)

# Helpers, record writers and variable holders: no operator's play lists them.
INTERNAL = {"packages", "slurm_install", "gpu_facts", "fabric_facts", "stack_record", "as_built",
            "burnin", "burnin_settings", "drift_settings", "upgrade", "upgrade_settings"}


def _roles() -> list[str]:
    return sorted(p.name for p in ROLES.iterdir() if p.is_dir())


def _generated(text: str) -> str:
    return text.split(role_docs.ROLES_BEGIN, 1)[1].split(role_docs.ROLES_END, 1)[0]


def test_architecture_table_lists_every_role_with_its_kind_and_entry_points():
    table = _generated((REPO / "docs" / "architecture.md").read_text())
    rows = {line.split("`")[1]: line for line in table.splitlines() if line.startswith("| [`")}
    assert sorted(rows) == _roles()
    for name, row in rows.items():
        kind = "internal" if name in INTERNAL else "public"
        assert f"| {kind} |" in row, row
        for entry in role_docs.specs_of(ROLES / name):
            assert f"`{entry}`" in row.rsplit("|", 2)[1], (name, entry)
    assert f"{len(rows)} roles: {len(rows) - len(INTERNAL)} public, {len(INTERNAL)} internal" in table


def test_the_architecture_table_is_current():
    text = (REPO / "docs" / "architecture.md").read_text()
    assert role_docs.render(text, role_docs.role_table(ROLES), role_docs.ROLES_BEGIN, role_docs.ROLES_END) == text, \
        "run: python tests/harness/role_docs.py roles"


@pytest.mark.parametrize("name", _roles())
def test_internal_roles_say_so_in_spec_and_readme(name):
    role = ROLES / name
    assert role_docs.role_kind(role) == ("internal" if name in INTERNAL else "public")
    first_paragraph = role.joinpath("README.md").read_text().split("\n\n")[1]
    if name in INTERNAL:
        assert first_paragraph.startswith("Internal role"), first_paragraph
        # and names who uses it: a playbook or a role
        users = [r for r in _roles() if r != name and f"`{r}`" in first_paragraph]
        assert users or "playbooks/" in first_paragraph, first_paragraph
    else:
        assert "internal" not in first_paragraph.lower().split(".", 1)[0], first_paragraph


def test_a_mixed_marking_is_refused(tmp_path):
    role = tmp_path / "mixed"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main: {short_description: 'Internal: a'}\n  other: {short_description: b}\n")
    with pytest.raises(ValueError, match="mixed"):
        role_docs.role_kind(role)


def test_check_fails_when_the_table_is_stale_and_the_rewrite_fixes_it(tmp_path, capsys):
    roles = tmp_path / "roles"
    for name in ("common", "packages"):
        shutil.copytree(ROLES / name, roles / name)
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "architecture.md"
    doc.write_text(f"# Architecture\n\n{role_docs.ROLES_BEGIN}\n{role_docs.ROLES_END}\n\nAfter.\n")
    assert role_docs.main(["role_docs.py", "--check", str(roles)]) == 1
    assert str(doc) in capsys.readouterr().out
    assert role_docs.main(["role_docs.py", str(roles)]) == 0
    assert role_docs.main(["role_docs.py", "--check", str(roles)]) == 0
    text = doc.read_text()
    assert "[`common`]" in text and "| internal |" in text and text.endswith("\n\nAfter.\n")
    # a role added without regenerating makes the table stale
    shutil.copytree(ROLES / "cuda", roles / "cuda")
    assert role_docs.main(["role_docs.py", "--check", str(roles)]) == 1
    # so does a role becoming internal in its spec
    role_docs.main(["role_docs.py", str(roles)])
    spec = roles / "cuda" / "meta" / "argument_specs.yml"
    data = yaml.safe_load(spec.read_text())
    data["argument_specs"]["main"]["short_description"] = "Internal: " + data["argument_specs"]["main"]["short_description"]
    spec.write_text(yaml.safe_dump(data))
    assert role_docs.role_kind(roles / "cuda") == "internal"
    assert role_docs.main(["role_docs.py", "--check", str(roles)]) == 1


def test_markers_are_required(tmp_path):
    with pytest.raises(ValueError, match="BEGIN ROLES"):
        role_docs.render("no markers", "x", role_docs.ROLES_BEGIN, role_docs.ROLES_END)
