"""The ``.npz`` files of ``extql run``: input arrays read, outputs written.

Reading says what is wrong with a file in the user's terms (an empty file, a
single-array ``.npy``, not a zip archive, a damaged member, an object array)
instead of NumPy's own messages, which for anything that is not a zip archive
talk about pickled data.  Writing uses exactly the given name (``np.savez``
given a name appends ``.npz`` to it).
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

from .errors import CliError, readable_file, writable_output

__all__ = ["load_npz", "save_npz"]

_NPY_MAGIC = b"\x93NUMPY"
_HOW = "write it with numpy.savez(path, input_name=array, ...)"


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file by name; :class:`CliError` naming the
    file and the problem when it is not a readable ``.npz`` of plain arrays."""
    p = readable_file(path, "an .npz file of input arrays")
    with open(p, "rb") as f:
        head = f.read(len(_NPY_MAGIC))
    if not head:
        raise CliError(f"{p}: is an empty file, not a valid .npz file; {_HOW}")
    if head == _NPY_MAGIC:
        raise CliError(f"{p}: is a .npy file (one unnamed array), not a valid .npz file of "
                       f"named arrays; {_HOW}")
    if not zipfile.is_zipfile(p):
        raise CliError(f"{p}: not a valid .npz file (it is not a zip archive); {_HOW}")
    arrays: dict[str, np.ndarray] = {}
    member = None
    try:
        with np.load(p, allow_pickle=False) as data:
            for member in data.files:
                value = data[member]
                if not isinstance(value, np.ndarray):
                    raise CliError(f"{p}: not a valid .npz file: member {member!r} is not a "
                                   f"NumPy array; {_HOW}")
                arrays[member] = value
    except CliError:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile, zlib, NumPy's header parser ...
        where = f"member {member!r}: " if member is not None else ""
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if "allow_pickle" in reason or "pickle" in reason:
            reason = "it holds Python objects, not plain arrays"
        raise CliError(f"{p}: not a valid .npz file ({where}{reason}); {_HOW}") from None
    return arrays


def save_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` exactly (no ``.npz`` appended);
    :class:`CliError` when it cannot be written."""
    p = writable_output(path, "outputs (.npz)")
    try:
        with open(p, "wb") as f:
            np.savez(f, **arrays)
    except OSError as exc:
        raise CliError(f"{p}: cannot write the outputs ({exc.strerror or exc})") from None
