"""The checker (see ``walk.py``); the names other modules import."""

from .walk import FAILED, NOT_VERIFIED, PASSED, CheckReport, Divergence, References, Unchecked, check

__all__ = ["FAILED", "NOT_VERIFIED", "PASSED", "CheckReport", "Divergence", "References", "Unchecked", "check"]
