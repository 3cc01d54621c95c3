# kiln test bed: the containers.podman connection with pipelining.
# GNU General Public License v3.0+ (the subclassed plugin's licence)
"""Connection to kiln's test-bed containers: the module on one process's stdin.

The collection's podman connection (containers.podman.podman) runs four
podman commands for every module a task sends (mount the container, make a
temporary directory, run, remove it); this one sends the module on the
standard input of a single process, as SSH with pipelining does on a real
site (kiln's ansible.cfg enables it there; it names nothing of the test bed).

That process enters the running container's namespaces with ``nsenter``
(mount, UTS, IPC, network, PID, and cgroup/time where they differ from the
host's), with the container's environment and its init's resource limits
(memlock, open files, processes): the same view ``podman exec -i`` gives, at
a few milliseconds instead of ~0.2-0.5 s of podman/conmon/runc per task on
the 2-core test bed. What a task runs sits in the host's cgroup rather than
the container's; the services it starts belong to the container's systemd as
before, and killing the container kills its PID namespace, so a task cannot
outlive its node. The container's PID, start time, environment and limits
are looked up once (``podman inspect``) and cached per container in a file,
checked against /proc before each use (a restarted container is looked up
again). Without root, nsenter, or with a non-root remote user, or for a
container that is not running, it falls back to ``podman exec -i``. A
container that is stopped or gone is reported as SSH reports a host that is
down: unreachable (AnsibleConnectionFailure), not as a failed module. File
transfers use the same process (``cat`` from/to its standard streams).

It takes the short name ``podman``: ANSIBLE_CONNECTION_PLUGINS, set by
molecule's base config (.config/molecule/config.yml) for the scenarios and by
the Makefile and tests/harness/lib.sh for ``make demo`` and the benchmarks,
puts this directory before the collections, so the ``ansible_connection:
podman`` that molecule's podman driver writes and inventories/testbed uses
resolve here.
The fully qualified containers.podman.podman stays the collection's. Test bed
only; real sites connect over SSH.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase
from ansible_collections.containers.podman.plugins.connection.podman import Connection as _PodmanConnection

DOCUMENTATION = """
    name: podman
    short_description: kiln's test-bed containers through podman exec, with pipelining
    description:
      - The containers.podman.podman connection with pipelining (the module on the
        standard input of one podman exec -i). Test bed only; real sites use SSH.
    options:
      remote_addr:
        description: The container to run in.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description: User inside the container.
        vars:
          - name: ansible_user
      podman_extra_args:
        description: Extra arguments to the podman command line.
        default: ''
        vars:
          - name: ansible_podman_extra_args
      podman_executable:
        description: The podman executable.
        default: podman
        vars:
          - name: ansible_podman_executable
      nsenter:
        description: Enter the container's namespaces with nsenter instead of podman exec (root only).
        type: boolean
        default: true
        vars:
          - name: kiln_testbed_nsenter
        env:
          - name: KILN_TESTBED_NSENTER
      pipelining:
        description: Send modules on standard input instead of copying them.
        type: boolean
        default: true
        vars:
          - name: ansible_pipelining
"""


#: /proc/<pid>/ns entry -> nsenter flag; a namespace the container shares with
#: the host (cgroup and time on a cgroup v1 host) is not entered.
_NS_FLAGS = (("mnt", "-m"), ("uts", "-u"), ("ipc", "-i"), ("net", "-n"), ("pid", "-p"),
             ("cgroup", "-C"), ("time", "-T"))
#: /proc/<pid>/limits rows the container sets (podman's --ulimit, the test
#: bed's 8 MiB memlock) -> resource limit names
_LIMITS = {"Max stack size": "RLIMIT_STACK", "Max core file size": "RLIMIT_CORE",
           "Max processes": "RLIMIT_NPROC", "Max open files": "RLIMIT_NOFILE",
           "Max locked memory": "RLIMIT_MEMLOCK"}


def proc_start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def parse_limits(text: str) -> dict[str, list[int]]:
    """/proc/<pid>/limits -> {RLIMIT_name: [soft, hard]}, -1 for unlimited."""
    out: dict[str, list[int]] = {}
    for line in text.splitlines():
        for label, name in _LIMITS.items():
            if line.startswith(label):
                values = line[len(label):].split()[:2]
                try:
                    out[name] = [-1 if v == "unlimited" else int(v) for v in values]
                except ValueError:
                    continue
    return {k: v for k, v in out.items() if len(v) == 2}


def namespace_flags(pid: int) -> list[str]:
    """nsenter flags for every namespace of *pid* that differs from this process's."""
    flags = []
    for ns, flag in _NS_FLAGS:
        try:
            if os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"):
                flags.append(flag)
        except OSError:
            continue
    return flags


#: What podman exec says, exiting 255 (stopped) or 125 (removed), for a container that is not running.
NOT_RUNNING = (b"container state improper", b"no such container")


def not_running(rc: int, stderr: bytes) -> bool:
    """True when podman exec's own error says the container is not running (a node that is down).

    Only a hint: a command in a running container may exit 255 and print the same words,
    so the connection confirms it with ``podman container inspect`` before it says unreachable.
    """
    return rc in (125, 255) and any(marker in (stderr or b"").lower() for marker in NOT_RUNNING)


def _cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"kiln-testbed-ns-{os.getuid()}"


def _apply_limits(limits: dict[str, list[int]]) -> None:
    for name, (soft, hard) in limits.items():
        inf = resource.RLIM_INFINITY
        resource.setrlimit(getattr(resource, name), (inf if soft < 0 else soft, inf if hard < 0 else hard))


class Connection(_PodmanConnection):
    """podman exec, with the module on stdin (pipelining)."""

    transport = "podman"
    has_pipelining = True

    def _connect(self) -> Connection:
        # Mount the container's filesystem only when a file is transferred.
        if not self._connected:
            self._connected = True
        return self

    def _ensure_mounted(self) -> None:
        if self._mount_point is None and not getattr(self, "_mount_tried", False):
            self._mount_tried = True
            super()._connect()

    def _ns_target(self) -> dict[str, Any] | None:
        """The running container's {pid, start, flags, env, limits, nsenter}, or None: use podman exec."""
        if not self.get_option("nsenter") or os.geteuid() != 0 or self.user not in (None, "", "root"):
            return None
        nsenter = shutil.which("nsenter")
        if nsenter is None:
            return None
        cache = _cache_dir() / f"{self._container_id}.json"
        try:
            record = json.loads(cache.read_text(encoding="utf-8"))
            if proc_start_time(int(record["pid"])) == record["start"]:
                return record
        except (OSError, ValueError, KeyError, TypeError):
            pass
        rc, out, _ = self._podman(["inspect", "--format", "{{.State.Pid}}\t{{json .Config.Env}}"])
        try:
            pid_text, env_json = to_native(out).strip().split("\t", 1)
            pid = int(pid_text)
            env = dict(item.split("=", 1) for item in json.loads(env_json) if "=" in item)
        except ValueError:
            return None
        start = proc_start_time(pid) if rc == 0 and pid > 0 else None
        if start is None:
            return None
        try:
            limits = parse_limits(Path(f"/proc/{pid}/limits").read_text(encoding="ascii"))
        except OSError:
            return None
        env.setdefault("HOME", "/root")
        record = {"pid": pid, "start": start, "flags": namespace_flags(pid), "env": env,
                  "limits": limits, "nsenter": nsenter}
        try:
            cache.parent.mkdir(mode=0o700, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=cache.parent, delete=False, encoding="utf-8") as tmp:
                json.dump(record, tmp)
            os.replace(tmp.name, cache)
        except OSError:
            pass
        return record

    def _ns_run(self, target: dict[str, Any], argv: list[str], in_data: bytes | None) -> tuple[int, bytes, bytes]:
        local = [target["nsenter"], "-t", str(target["pid"]), *target["flags"], "-r", "-w", "--", *argv]
        limits = target["limits"]
        proc = subprocess.Popen(local, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=target["env"], preexec_fn=lambda: _apply_limits(limits))
        stdout, stderr = proc.communicate(input=in_data or b"")
        return proc.returncode, stdout, stderr

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False) -> Any:
        target = self._ns_target()
        if target is not None:
            ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
            return self._ns_run(target, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
        if in_data is None:
            result = super().exec_command(cmd, in_data=None, sudoable=sudoable)
        else:
            # the collection runs "podman exec" without -i, which drops the standard input
            ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
            args = ["exec", "-i"] + (["--user", self.user] if self.user else [])
            result = self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
        if not_running(result[0], result[2]) and self._is_down():
            raise AnsibleConnectionFailure(
                f"kiln test bed: {self._container_id} is not running (a node that is down): {to_native(result[2])[:200]}")
        return result

    def _is_down(self) -> bool:
        """The container is stopped or gone (podman container inspect: not running, or no such container)."""
        rc, out, _ = self._podman(["container", "inspect", "--format", "{{.State.Running}}"])
        return rc != 0 or to_native(out).strip() != "true"

    def put_file(self, in_path: str, out_path: str) -> None:
        target = self._ns_target()
        if target is None:
            self._ensure_mounted()
            super().put_file(in_path, out_path)
            return
        ConnectionBase.put_file(self, in_path, out_path)
        rc, _, stderr = self._ns_run(target, ["/bin/sh", "-c", 'cat > "$1"', "kiln-put", out_path],
                                     Path(in_path).read_bytes())
        if rc != 0:
            raise AnsibleError(f"kiln test bed: cannot write {out_path} in {self._container_id}: {to_native(stderr)}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        target = self._ns_target()
        if target is None:
            self._ensure_mounted()
            super().fetch_file(in_path, out_path)
            return
        ConnectionBase.fetch_file(self, in_path, out_path)
        rc, stdout, stderr = self._ns_run(target, ["cat", "--", in_path], None)
        if rc != 0:
            raise AnsibleError(f"kiln test bed: cannot read {in_path} in {self._container_id}: {to_native(stderr)}")
        Path(out_path).write_bytes(stdout)
