#!/usr/bin/python3
"""kiln: parse check of a rendered slurm.conf before it replaces the live one.

Slurm 22.05 has no `slurmctld -t`; this catches what a template can get wrong:
malformed Key=Value lines, missing essentials, node lines without hardware,
partitions naming undefined nodes, Gres without GresTypes. Exit 1 with the
reasons on stderr. Stdlib only.  Usage: slurm-conf-check FILE
"""
import re
import sys

REQUIRED = ("ClusterName", "SlurmctldHost", "AuthType", "SelectType", "ProctrackType")
NODE_KEYS = ("CPUs", "RealMemory")


def expand(hostlist):
    names = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", hostlist):
        m = re.match(r"^(.*)\[([^\]]*)\](.*)$", part)
        if not m:
            names.append(part)
            continue
        for rng in m.group(2).split(","):
            lo, _, hi = rng.partition("-")
            hi = hi or lo
            for i in range(int(lo), int(hi) + 1):
                names.append(f"{m.group(1)}{str(i).zfill(len(lo))}{m.group(3)}")
    return names


def main(path):
    errors, keys, nodes, partitions = [], {}, {}, []
    with open(path, encoding="utf-8") as fh:
        for num, raw in enumerate(fh, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            pairs = line.split()
            parsed = {}
            for pair in pairs:
                key, sep, value = pair.partition("=")
                if not sep or not key or not value:
                    errors.append(f"line {num}: '{pair}' is not Key=Value")
                parsed[key] = value
            first = pairs[0].partition("=")[0]
            if first == "NodeName" and len(pairs) > 1:
                for key in NODE_KEYS:
                    if key not in parsed:
                        errors.append(f"line {num}: NodeName {parsed['NodeName']} lacks {key}")
                for name in expand(parsed["NodeName"]):
                    nodes[name] = parsed
            elif first == "PartitionName":
                partitions.append((num, parsed))
            else:
                keys.setdefault(first, parsed[first])
    for key in REQUIRED:
        if key not in keys:
            errors.append(f"{key} is missing")
    if any("Gres" in n for n in nodes.values()) and "GresTypes" not in keys:
        errors.append("nodes declare Gres but GresTypes is missing")
    for num, part in partitions:
        for name in expand(part.get("Nodes", "")):
            if name not in nodes and name != "ALL":
                errors.append(f"line {num}: partition {part['PartitionName']} names undefined node {name}")
    for err in errors:
        print(f"slurm-conf-check: {path}: {err}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else 2)
