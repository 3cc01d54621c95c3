# kiln test bed: the containers.podman connection with pipelining.
# GNU General Public License v3.0+ (the subclassed plugin's licence)
"""Connection to kiln's test-bed containers: ``podman exec`` with pipelining.

The collection's podman connection (containers.podman.podman) runs four
podman commands for every module a task sends (mount the container, make a
temporary directory, run, remove it); this one sends the module on the
standard input of a single ``podman exec -i``, as SSH with pipelining does on
a real site (kiln's ansible.cfg enables it there). File transfers (copy,
template, fetch) use the collection's methods on a lazily mounted container.

It takes the short name ``podman``: ansible.cfg's ``connection_plugins`` (and
molecule's ANSIBLE_CONNECTION_PLUGINS, .config/molecule/config.yml) put this
directory before the collections, so the ``ansible_connection: podman`` that
molecule's podman driver writes and inventories/testbed uses resolve here.
The fully qualified containers.podman.podman stays the collection's. Test bed
only; real sites connect over SSH.
"""

from __future__ import annotations

import shlex
from typing import Any

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
      pipelining:
        description: Send modules on standard input instead of copying them.
        type: boolean
        default: true
        vars:
          - name: ansible_pipelining
"""


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

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False) -> Any:
        if in_data is None:
            return super().exec_command(cmd, in_data=None, sudoable=sudoable)
        # the collection runs "podman exec" without -i, which drops the standard input
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec", "-i"] + (["--user", self.user] if self.user else [])
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path: str, out_path: str) -> None:
        self._ensure_mounted()
        super().put_file(in_path, out_path)

    def fetch_file(self, in_path: str, out_path: str) -> None:
        self._ensure_mounted()
        super().fetch_file(in_path, out_path)
