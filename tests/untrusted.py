"""Helpers of the tests where another local user prepares what flowpoint reads."""

from __future__ import annotations

import os
import stat


class Planted:
    """What another user would plant: a pickle that runs code when it is loaded (os.system in
    issue 17); here it creates the file ``marker``, so a test can tell whether it ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)
