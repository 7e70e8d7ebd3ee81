"""User-facing errors: bad input that the CLI reports in one line and exits 2 on, having written nothing."""
from __future__ import annotations


class UserError(ValueError):
    pass


def user_error_types() -> tuple[type[BaseException], ...]:
    """Every exception that means "your input is wrong", from each room of the house."""
    from stages.checkpoint import CheckpointError
    from stages.config import ConfigError
    from stages.protocol import ProtocolError

    from .models import ModelError

    return UserError, ModelError, ProtocolError, ConfigError, CheckpointError
