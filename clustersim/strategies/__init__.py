"""Strategy plugins and their registry."""

from .base import (
    ENTRY_POINT_GROUP,
    Strategy,
    load_plugins,
    registered_strategies,
    strategy_for,
    strategy_for_scenario,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Strategy",
    "load_plugins",
    "registered_strategies",
    "strategy_for",
    "strategy_for_scenario",
]
