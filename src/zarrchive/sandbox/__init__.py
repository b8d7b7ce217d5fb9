"""The second wall: what an uploader controls is decoded in a child process that can't reach
the archive's secrets, data or memory even if a check of the first wall is missed.

:func:`run_task` runs a task module of the archive (``prepare(args)`` returns a
:class:`PreparedTask`) in ``python -I -m zarrchive.sandbox.child`` under
:class:`Limits`; the answer is a :class:`TaskResult`.  See :mod:`zarrchive.sandbox.child`
for the walls and :mod:`zarrchive.sandbox.probe` for a task that tests them.
"""

from __future__ import annotations

from zarrchive.sandbox.protocol import Limits, PreparedTask, Status
from zarrchive.sandbox.runner import TaskResult, run_task

__all__ = ["Limits", "PreparedTask", "Status", "TaskResult", "run_task"]
