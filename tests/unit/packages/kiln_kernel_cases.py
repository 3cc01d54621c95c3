"""The kernel hold's fixtures (tests/fixtures/kernel-hold/) as the kiln_packages module reads them."""
from __future__ import annotations

from kiln_paths import REPO

FIX = REPO / "tests" / "fixtures" / "kernel-hold"
_WANT = {"install": "i", "hold": "h", "deinstall": "r", "purge": "p"}
_STATE = {"installed": "i", "config-files": "c", "not-installed": "n", "half-installed": "H", "unpacked": "U"}


def dpkg_read(name: str) -> tuple[str, list[str], str, str]:
    """A status fixture as the module reads it: (running, releases, relations read, dpkg-query -S of the images).

    The relations read is what ``dpkg-query -W -f DPKG_RELATIONS_FORMAT`` prints for those packages; the
    owners read what ``dpkg-query -S /boot/vmlinuz-*`` prints (each image owned by ``linux-image-<release>``).
    """
    text = (FIX / name).read_text()
    head, _, body = text.partition("\n")
    releases = head.removeprefix("# boot:").split()
    lines = []
    for stanza in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
        want, _, state = fields["Status"].split(" ")
        abbrev = _WANT[want] + _STATE[state] + " "
        lines.append("\t".join([fields["Package"], abbrev, fields.get("Pre-Depends", ""), fields.get("Depends", "")]))
    owners = "".join(f"linux-image-{r}: /boot/vmlinuz-{r}\n" for r in releases)
    return (releases[0] if releases else "6.8.0-49-generic"), releases, "\n".join(lines) + "\n", owners


def dpkg_database(name: str) -> str:
    """The installed packages of a status fixture as the module's package read prints them (dpkg.txt)."""
    lines = []
    for stanza in (FIX / name).read_text().partition("\n")[2].strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
        want, _, state = fields["Status"].split(" ")
        lines.append("\t".join([fields["Package"], fields["Version"], _WANT[want] + _STATE[state] + " ", fields["Status"]]))
    return "\n".join(lines) + "\n"
