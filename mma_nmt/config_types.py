"""Choice types that configs of several layers share (``config_io`` validates every ``Literal`` field)."""

from __future__ import annotations

from typing import Literal

# fused operators, or plain-PyTorch reference modules with the same parameters
Implementation = Literal["fused", "reference"]
