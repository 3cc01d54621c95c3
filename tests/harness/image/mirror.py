"""Print the Debian archive URI this machine's apt is configured with.

Reads deb822 (/etc/apt/sources.list.d/*.sources) and one-line sources;
picks the entry that serves the 'bookworm' suite of the main archive.
"""
from __future__ import annotations

import glob
import sys


def deb822_uris(text: str) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "uris" in fields:
            out.append((fields["uris"].split()[0], fields.get("suites", "").split()))
    return out


def oneline_uris(text: str) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "deb":
            rest = [p for p in parts[1:] if not p.startswith("[")]
            out.append((rest[0], [rest[1]]))
    return out


def main() -> int:
    entries: list[tuple[str, list[str]]] = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path, encoding="utf-8") as handle:
            entries += deb822_uris(handle.read())
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        try:
            with open(path, encoding="utf-8") as handle:
                entries += oneline_uris(handle.read())
        except FileNotFoundError:
            continue
    for uri, suites in entries:
        if "bookworm" in suites and "security" not in uri:
            print(uri)
            return 0
    print("no Debian bookworm mirror found in apt sources; set KILN_DEBIAN_MIRROR", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
