from .base import BaseRollout

__all__ = ["BaseRollout"]
