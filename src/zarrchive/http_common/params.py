"""Path parameters both faces take, declared once (their bounds are part of the contract)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

#: An API key's id (``/api/auth/tokens/{key_id}/``, the account page's revoke button).
KeyId = Annotated[int, Path(ge=1, le=2**31 - 1, description="The key's id")]
