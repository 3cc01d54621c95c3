# -*- coding: utf-8 -*-
# Copyright: kiln contributors
# SPDX-License-Identifier: MIT
"""Prometheus alerting rules for kiln-health's textfile metrics, generated from the health rules file.

kiln-health (the node program run between Slurm jobs) writes a Prometheus textfile for node-exporter's
textfile collector; the node is the scrape's ``instance`` label (the series carry no node label). The
alerts are built from ``data/burnin_health.yml`` and nowhere else written down: the check catalogue
(``node_health.checks``, :func:`kiln.health.catalogue.catalogue`) and the ``memory:`` rules' numbers.
A changed threshold or a new check in the data changes the rules; no generated copy is kept in git
(``tools/kiln-health-alert-rules`` prints them, the ``kiln_health_alert_rules`` filter returns them).

The rules (one group, :func:`alert_rules`):

``KilnHealth<Check>`` (one per check; ``xid.kernel_log`` is ``KilnHealthXidKernelLog``)
    ``kiln_health_check_status{check="<id>",status="FAIL"} == 1``, the catalogue's severity and summary.
``KilnHealth<Check>Warn`` (checks of severity ``critical`` only)
    The same check reporting WARN: severity ``warning`` (a ticket). A check whose FAIL is already a
    ticket gets no WARN alert; its WARN shows in ``kiln_health_check_status``.
``KilnHealthCheckUnknown``
    ``kiln_health_unknown_runs >= node_health_unknown_drain_after``: a check that could not run that
    many runs in a row.
``KilnHealthStale``
    ``time() - kiln_health_last_run_timestamp_seconds{hook="check"} > 3 * node_health_interval``: the
    periodic check stopped writing. It sees a textfile that is no longer updated; a node whose
    textfile was never written (or was removed) has no series, and PromQL cannot say per instance that
    a series is absent without a list of the expected instances (``absent()`` answers for the whole
    query): that node is caught by its scrape (``up == 0``) or by the fleet's own inventory alert, not here.
Memory thresholds (only for the memory checks the catalogue names)
    Per GPU, from the ``memory:`` rules: ``kiln_health_gpu_ecc_volatile_uncorrectable{kind="sram"|"dram"}
    > max`` and ``{kind="total"} > max`` where the node reports no SRAM/DRAM split for that GPU,
    ``kiln_health_gpu_remapped_rows_pending|failure == 1``, ``kiln_health_gpu_retired_pages{cause=
    "double_bit"|"single_bit"} > max``. A rule of status FAIL takes its check's severity, WARN is
    ``warning``. ``memory.retired_pages.pending`` has no series in the textfile: its check's alert
    (``KilnHealthMemoryRetiredPages``) carries it.

Pure, standard library only; importable as ``kiln.health.alerts`` and as
``ansible.module_utils.kiln.health.alerts``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

from .. import verdict as kiln_verdict
from ..errors import FilterError
from . import rules as kiln_health_rules
from .catalogue import catalogue
from .rules import is_int, show

__all__ = [
    "DEFAULT_GROUP",
    "METRICS",
    "THRESHOLDS",
    "alert_name",
    "alert_rules",
    "kiln_health_alert_rules",
]

DEFAULT_GROUP = "kiln-node-health"
#: How many check intervals without a run make a node stale.
STALE_INTERVALS = 3
#: The textfile's series (the contract with kiln-health): name -> its labels.
METRICS: Dict[str, Tuple[str, ...]] = {
    "kiln_health_last_run_timestamp_seconds": ("hook",),
    "kiln_health_run_duration_seconds": ("hook",),
    "kiln_health_check_status": ("hook", "check", "status"),
    "kiln_health_node_status": ("hook", "status"),
    "kiln_health_unknown_runs": ("check",),
    "kiln_health_clean_runs": (),
    "kiln_health_drained": (),
    "kiln_health_gpu_ecc_volatile_uncorrectable": ("gpu", "kind"),
    "kiln_health_gpu_remapped_rows_pending": ("gpu",),
    "kiln_health_gpu_remapped_rows_failure": ("gpu",),
    "kiln_health_gpu_retired_pages": ("gpu", "cause"),
    "kiln_health_gpu_nvlink_inactive_links": ("gpu",),
    "kiln_health_xid_events": ("xid",),
    "kiln_health_ib_port_active": ("port",),
    "kiln_health_ib_counter_delta": ("port", "counter"),
}
_ECC = 'kiln_health_gpu_ecc_volatile_uncorrectable{kind="%s"}'
#: The memory rules that have a series: (check, section, rule, alert, selector, what), the comparison
#: being ``> max`` for a counter rule and ``== 1`` for a flag rule (no max).
THRESHOLDS: Tuple[Tuple[str, str, str, str, str, str], ...] = (
    (kiln_health_rules.CHECK_ECC, "ecc_uncorrectable", "volatile_sram_uncorrectable",
     "KilnHealthEccSramUncorrectable", _ECC % "sram", "volatile uncorrectable SRAM ECC errors"),
    (kiln_health_rules.CHECK_ECC, "ecc_uncorrectable", "volatile_dram_uncorrectable",
     "KilnHealthEccDramUncorrectable", _ECC % "dram", "volatile uncorrectable DRAM ECC errors"),
    (kiln_health_rules.CHECK_ECC, "ecc_uncorrectable", "volatile_uncorrectable",
     "KilnHealthEccUncorrectable", _ECC % "total", "volatile uncorrectable ECC errors (no SRAM/DRAM split)"),
    (kiln_health_rules.CHECK_REMAP, "remapped_rows", "pending",
     "KilnHealthRemappedRowsPending", "kiln_health_gpu_remapped_rows_pending", "a row remap pending (GPU reset)"),
    (kiln_health_rules.CHECK_REMAP, "remapped_rows", "failure",
     "KilnHealthRemappedRowsFailure", "kiln_health_gpu_remapped_rows_failure", "a row remap failed (RMA)"),
    (kiln_health_rules.CHECK_RETIRED, "retired_pages", "double_bit",
     "KilnHealthRetiredPagesDoubleBit", 'kiln_health_gpu_retired_pages{cause="double_bit"}',
     "double-bit retired pages"),
    (kiln_health_rules.CHECK_RETIRED, "retired_pages", "single_bit",
     "KilnHealthRetiredPagesSingleBit", 'kiln_health_gpu_retired_pages{cause="single_bit"}',
     "single-bit retired pages"),
)
#: memory rules with no series in the textfile (their check's alert carries them).
NOT_EXPORTED = (("retired_pages", "pending"),)


def alert_name(check_id: str, suffix: str = "") -> str:
    """``KilnHealth`` + the check id in CamelCase (``xid.kernel_log`` -> ``KilnHealthXidKernelLog``)."""
    parts = check_id.replace(".", "_").split("_")
    return "KilnHealth" + "".join(part[:1].upper() + part[1:] for part in parts if part) + suffix


def _positive(value: Any, knob: str, unit: str) -> int:
    if not is_int(value) or value < 1:
        raise kiln_verdict.KilnConfigError(f"{knob} must be a positive integer ({unit}), not {show(value)}")
    return value


def _rule(alert: str, expr: str, labels: Dict[str, str], summary: str, description: str) -> Dict[str, Any]:
    return {"alert": alert, "expr": expr, "for": "0m", "labels": labels,
            "annotations": {"summary": summary, "description": description}}


def _check_rules(checks: Mapping[str, Mapping[str, Any]]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for check_id, spec in checks.items():
        for status, suffix, severity in (("FAIL", "", spec["severity"]), ("WARN", "Warn", "warning")):
            if status == "WARN" and spec["severity"] != "critical":
                continue  # its FAIL is a ticket already: a WARN of it is no alert
            out.append(_rule(
                alert_name(check_id, suffix),
                f'kiln_health_check_status{{check="{check_id}",status="{status}"}} == 1',
                {"severity": severity, "check": check_id},
                spec["summary"] if status == "FAIL" else f"{check_id} WARN, short of its FAIL ({spec['summary']})",
                f"{{{{ $labels.instance }}}}: kiln-health check {check_id} reported {status} "
                f"in its {{{{ $labels.hook }}}} run"))
    return out


def _memory_rules(health: Mapping[str, Any], checks: Mapping[str, Mapping[str, Any]]) -> List[Dict[str, Any]]:
    memory, _ = kiln_health_rules.memory_rules(health)
    kinds = {(section, name): kind for section, name, kind in kiln_health_rules._MEMORY_RULES}
    out: List[Dict[str, Any]] = []
    for check_id, section, name, alert, selector, what in THRESHOLDS:
        if check_id not in checks:
            continue  # the site does not run that check: its series are not judged either
        rule = memory[section][name]
        severity = checks[check_id]["severity"] if rule["status"] == kiln_verdict.FAIL else "warning"
        where = f"memory.{section}.{name}"
        if kinds[(section, name)] == "counter":
            expr = f"{selector} > {rule['max']}"
            if selector.endswith('{kind="total"}'):  # the total judges only a GPU without the split
                expr += ' unless ignoring(kind) kiln_health_gpu_ecc_volatile_uncorrectable{kind=~"sram|dram"}'
            summary = f"a GPU with {what} above {rule['max']}"
            detail = f"{{{{ $value }}}} {what} (rule {where}: max {rule['max']}, {rule['status']})"
        else:
            expr = f"{selector} == 1"
            summary = f"a GPU with {what}"
            detail = f"{what} (rule {where}: {rule['status']})"
        out.append(_rule(alert, expr, {"severity": severity, "check": check_id}, summary,
                         f"{{{{ $labels.instance }}}} GPU {{{{ $labels.gpu }}}}: {detail}"))
    return out


def alert_rules(health: Mapping[str, Any], interval_s: int, unknown_runs: int,
                group: str = DEFAULT_GROUP) -> Dict[str, Any]:
    """The Prometheus rules document ``{"groups": [{"name": group, "rules": [...]}]}`` for the loaded
    health rules file *health* (data/burnin_health.yml), kiln-health running every *interval_s* seconds
    (node_health_interval) and draining after *unknown_runs* UNKNOWN runs of a check
    (node_health_unknown_drain_after). KilnConfigError naming the input or the data key otherwise."""
    interval = _positive(interval_s, "node_health_interval", "seconds")
    unknown = _positive(unknown_runs, "node_health_unknown_drain_after", "runs")
    if not isinstance(group, str) or not group.strip() or not group.isprintable():
        raise kiln_verdict.KilnConfigError(f"group: a non-empty one-line rule group name, not {show(group)}")
    checks = catalogue(health)
    stale = STALE_INTERVALS * interval
    out = _check_rules(checks)
    out.append(_rule(
        "KilnHealthCheckUnknown", f"kiln_health_unknown_runs >= {unknown}", {"severity": "warning"},
        "a kiln-health check could not run (UNKNOWN) several runs in a row",
        f"{{{{ $labels.instance }}}}: kiln-health check {{{{ $labels.check }}}} UNKNOWN for {{{{ $value }}}} "
        f"consecutive runs (node_health_unknown_drain_after: {unknown})"))
    out.append(_rule(
        "KilnHealthStale", f'time() - kiln_health_last_run_timestamp_seconds{{hook="check"}} > {stale}',
        {"severity": "warning"}, "kiln-health's periodic check stopped running",
        f"{{{{ $labels.instance }}}}: no kiln-health check run for more than {stale} s "
        f"({STALE_INTERVALS} x node_health_interval {interval} s): the node runs jobs unchecked"))
    out.extend(_memory_rules(health, checks))
    return {"groups": [{"name": group.strip(), "rules": out}]}


# --------------------------------------------------------------------------- the filter
# What filter_plugins/kiln_health_filters.py registers: alert_rules, its errors one FilterError.

def kiln_health_alert_rules(health: Any, interval_s: Any, unknown_runs: Any,
                            group: Any = DEFAULT_GROUP) -> Dict[str, Any]:
    """:func:`alert_rules` as a filter: ``health_rules | kiln_health_alert_rules(interval, unknown_runs)``."""
    try:
        return alert_rules(health, interval_s, unknown_runs, group)
    except kiln_verdict.KilnConfigError as exc:
        raise FilterError(f"kiln_health_alert_rules: {exc}") from exc
