"""Shared by the unit tests: the repository root, whichever directory under tests/unit a test sits in."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
