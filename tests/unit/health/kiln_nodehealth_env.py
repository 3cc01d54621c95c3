"""Shared by the kiln-health tests: a node built from the fixtures (emulated GPUs and HCAs in a tmp sysfs
tree, the nvidia-smi emulator and the per-node dmesg on PATH, fake sinfo/scontrol), its configuration
and a runner of the real program (roles/node_health/files/kiln-health)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from kiln_paths import REPO

PROGRAM = REPO / "roles" / "node_health" / "files" / "kiln-health"
FIXTURES = REPO / "tests" / "fixtures"
PROFILES = {"h100": ("h100-sxm-8", "ndr8-storage"), "l40s": ("l40s-2", "roce8")}
EXPECT = {"h100": {"ports": 8, "rate_gbps": 400, "width": "4X", "link_layer": "InfiniBand", "exclude": ["mlx5_8"]},
          "l40s": None}

FAKE_SINFO = """#!/usr/bin/python3
import os, sys
print(open(os.environ["KILN_TEST_SINFO"]).read(), end="")
"""
FAKE_SCONTROL = """#!/usr/bin/python3
import json, os, sys
with open(os.environ["KILN_TEST_SCONTROL_LOG"], "a") as handle:
    handle.write(json.dumps(sys.argv[1:]) + "\\n")
"""
FAKE_SYSTEMCTL = """#!/usr/bin/python3
import os
print("LoadState=loaded")
print("ActiveState=" + open(os.environ["KILN_TEST_FM"]).read().strip())
"""


def rules() -> dict[str, Any]:
    return yaml.safe_load((REPO / "data" / "burnin_health.yml").read_text(encoding="utf-8"))


def fabric_rules() -> dict[str, Any]:
    return yaml.safe_load((REPO / "data" / "burnin_fabric.yml").read_text(encoding="utf-8"))


class Node:
    """One emulated node under *root*."""

    def __init__(self, root: Path, kind: str = "h100", **config: Any) -> None:
        self.root = root
        self.kind = kind
        gpu, rdma = PROFILES[kind]
        self.sysfs = root / "sysfs"
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        subprocess.run([sys.executable, str(FIXTURES / "gpu-emulator" / "make-sysfs.py"), "--profile",
                        str(FIXTURES / "gpu-emulator" / "profiles" / f"{gpu}.json"), "--root", str(self.sysfs)],
                       check=True, capture_output=True)
        subprocess.run([sys.executable, str(FIXTURES / "rdma" / "make-rdma-sysfs.py"), "--profile",
                        str(FIXTURES / "rdma" / "profiles" / f"{rdma}.json"), "--root", str(self.sysfs)],
                       check=True, capture_output=True)
        for name, text in (("nvidia-smi", (FIXTURES / "gpu-emulator" / "nvidia-smi").read_text()),
                           ("dmesg", (FIXTURES / "kernel-log" / "kiln-fixture-dmesg").read_text()),
                           ("sinfo", FAKE_SINFO), ("scontrol", FAKE_SCONTROL), ("systemctl", FAKE_SYSTEMCTL)):
            path = self.bin / name
            path.write_text(text, encoding="utf-8")
            path.chmod(0o755)
        (root / "rules.json").write_text(json.dumps(rules()), encoding="utf-8")
        (root / "fabric.json").write_text(json.dumps(fabric_rules()), encoding="utf-8")
        self.profile = FIXTURES / "gpu-emulator" / "profiles" / f"{gpu}.json"
        self.kmsg = root / "kmsg"
        self.faults = root / "gpu-faults.json"
        self.sinfo_file = root / "sinfo.txt"
        self.scontrol_log = root / "scontrol.log"
        self.fm = root / "fm-state"
        self.fm.write_text("active\n", encoding="utf-8")
        self.set_row("idle", "none")
        self.config = {
            "schema": "kiln.health.config/v1", "node": "gpu01",
            "expected_gpus": 8 if kind == "h100" else 2, "fabric_expect": EXPECT[kind], "gpudirect": None,
            "mounts": ["/"], "unknown_drain_after": 3, "resume_after_clean": 2, "actions": "slurm",
            "sysfs_root": str(self.sysfs), "proc_root": "/proc", "state_dir": str(root / "state"),
            "textfile_dir": str(root / "prom"), "rules": str(root / "rules.json"),
            "fabric_rules": str(root / "fabric.json"), "query_smi": True, "dcgm": "off",
            "journalctl": "", "dmesg": str(self.bin / "dmesg"), "timeout_s": 20, "mount_timeout_s": 5}
        self.config.update(config)
        self.write_config()

    def write_config(self) -> None:
        (self.root / "health.json").write_text(json.dumps(self.config), encoding="utf-8")

    def set_row(self, state: str, reason: str) -> None:
        self.sinfo_file.write_text(f"gpu01|{state}|{reason}\n", encoding="utf-8")

    def env(self) -> dict[str, str]:
        return dict(os.environ, PATH=f"{self.bin}:{os.environ.get('PATH', '')}", KILN_GPU_PROFILE=str(self.profile),
                    KILN_GPU_FAULTS=str(self.faults), KILN_FIXTURE_KMSG=str(self.kmsg),
                    KILN_TEST_SINFO=str(self.sinfo_file), KILN_TEST_SCONTROL_LOG=str(self.scontrol_log),
                    KILN_TEST_FM=str(self.fm))

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(PROGRAM), "--config", str(self.root / "health.json"),
                               "--lib", str(REPO / "module_utils"), *args], env=env or self.env(),
                              capture_output=True, text=True, timeout=120, check=False)

    def result(self, *args: str) -> dict[str, Any]:
        proc = self.run("--json", *args)
        assert proc.stdout.strip(), proc.stderr
        return dict(json.loads(proc.stdout), rc=proc.returncode)

    def scontrol_calls(self) -> list[list[str]]:
        if not self.scontrol_log.exists():
            return []
        return [json.loads(line) for line in self.scontrol_log.read_text(encoding="utf-8").splitlines()]

    def xid(self, number: int) -> None:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        with self.kmsg.open("a", encoding="utf-8") as handle:
            handle.write(f"[{uptime:12.6f}] NVRM: Xid (PCI:0000:18:00): {number}, pid=1, GPU has fallen off the bus.\n")

    def statuses(self, result: dict[str, Any]) -> dict[str, str]:
        return {c["id"]: c["status"] for c in result["checks"]}
