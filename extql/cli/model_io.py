"""Reading and writing the ONNX models of the ``extql`` commands.

Models are read with their external data (the ``.data`` files next to the
model) and large results are written with external data.  The commands that
rewrite a model file (``attach``, ``inline``, ``lower``, ``optimize``,
``fold``) share :func:`open_rewrite` and :func:`write_rewritten`: the paths are
checked before the work, a model whose graph is broken is refused with exit
status 1, and the output keeps external data when the input had it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import CliError, readable_file, require_modules, writable_output
from .progress import log

__all__ = [
    "EXTERNAL_THRESHOLD",
    "load_model",
    "require_external_data",
    "save_model",
    "serialisable",
    "require_integrity",
    "name_unsupported",
    "open_rewrite",
    "write_rewritten",
]

#: Above this many bytes a model is written with its tensors in a side file
#: (protobuf cannot serialise 2 GiB; onnxruntime needs a path then as well).
EXTERNAL_THRESHOLD = 1_500_000_000


def load_model(path: str | os.PathLike, *, with_data: bool = True) -> tuple[Any, bool]:
    """Load an ONNX model; external data from the model's directory when
    ``with_data``.  Returns (model, had_external_data)."""
    import onnx

    p = readable_file(path, "an .onnx model")
    if p.stat().st_size == 0:
        raise CliError(f"{p}: is an empty file, not an ONNX model")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises several kinds
        raise CliError(f"{p}: not a readable ONNX model ({exc})") from None
    if not model.HasField("graph"):
        raise CliError(f"{p}: not an ONNX model (the file holds no graph)")
    external = any(
        t.data_location == onnx.TensorProto.EXTERNAL for t in _all_initializers(model)
    )
    if external and with_data:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(p.parent))
        except Exception as exc:  # noqa: BLE001 - OSError, ValueError, ValidationError ...
            raise CliError(
                f"{p}: cannot read its external data ({exc}); keep the data file(s) next to the "
                "model, under the names the model refers to"
            ) from None
    return model, external


def require_external_data(path: str | os.PathLike, model) -> None:
    """A CliError (exit status 2), worded as :func:`load_model`'s, when a tensor
    of ``model`` (loaded without its data) refers to an external data file that
    is not a readable file next to the model, or is too short for the bytes
    the tensor names: for the commands that read the data where it is
    (``check`` hands the path to the ONNX checker) instead of loading it."""
    import onnx

    p = Path(path)
    for tensor in _all_initializers(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = p.parent / info.get("location", "")
        need = int(info.get("offset") or 0) + int(info.get("length") or 0)
        problem = None
        if not info.get("location") or not location.is_file():
            problem = f"{info.get('location', '')!r} is not a file next to the model"
        elif location.stat().st_size < need:
            problem = (f"{info['location']!r} holds {location.stat().st_size} bytes, the tensor "
                       f"{tensor.name!r} needs {need}")
        if problem is not None:
            raise CliError(
                f"{p}: cannot read its external data ({problem}); keep the data file(s) next "
                "to the model, under the names the model refers to"
            )


def _all_initializers(model) -> Iterator[Any]:
    """The initializers of the main graph and of every subgraph."""
    from ..onnx.graph import graphs

    for graph in graphs(model.graph):
        yield from graph.initializer


def save_model(model, path: str | os.PathLike, *, external: bool | None = None) -> str | None:
    """Save ``model``; with external data (one ``<name>.data`` file next to it)
    when ``external`` is true, or when None and the model is too big for one
    file.  Returns the data file name, or None."""
    import onnx

    p = writable_output(path, "model")
    if external is None:
        external = model.ByteSize() > EXTERNAL_THRESHOLD
    try:
        if not external:
            onnx.save_model(model, str(p))
            return None
        location = p.name + ".data"
        data = writable_output(p.parent / location, "model's external data")
        if data.exists():
            data.unlink()  # onnx appends to an existing data file
        onnx.save_model(model, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=location, size_threshold=1024)
    except OSError as exc:
        raise CliError(f"{p}: cannot write the model ({exc.strerror or exc})") from None
    except ValueError as exc:  # e.g. protobuf's 2 GiB limit
        raise CliError(f"{p}: cannot write the model ({exc})") from None
    return location if data.exists() else None  # (tensors under 1 KiB stay inline)


def serialisable(model, tmp: str, name: str) -> Any:
    """The model itself, or the path of a copy saved in ``tmp`` with external
    data when it is too big to hand to onnxruntime as bytes."""
    if model.ByteSize() <= EXTERNAL_THRESHOLD:
        return model
    path = os.path.join(tmp, name)
    save_model(model, path, external=True)
    return path


def require_integrity(path, model) -> None:
    """A CliError with exit status 1 when the model has whole-graph problems
    (:mod:`extql.tools.lint`): the passes and onnxruntime cannot work on it."""
    from ..tools.lint import integrity_problems

    problems = integrity_problems(model)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise CliError(f"{path}: {problems[0]}{more}; 'extql check {path}' lists them",
                       status=1)


def name_unsupported(path, model, name: str) -> None:
    """Name every operator that neither extql nor onnxruntime implements
    (Quark's BFPQuantizeDequantize, ...): a warning for the passes that leave
    such nodes as they are, a problem (exit 1) for ``inline``, whose output
    must run without any custom operator."""
    from ..onnx.dpu import refuse_dpu_nodes
    from ..onnx.microsoft import unsupported_nodes

    if name == "inline":
        try:
            refuse_dpu_nodes(model)
        except ValueError as exc:
            raise CliError(f"{path}: {exc}", status=1) from None
    unsupported = unsupported_nodes(model)
    if unsupported and name == "inline":
        more = f" (and {len(unsupported) - 1} more)" if len(unsupported) > 1 else ""
        raise CliError(f"{path}: unsupported operator {unsupported[0]}{more}: it cannot be "
                       "replaced by standard ops", status=1)
    for line in unsupported:
        print(f"warning: {path}: unsupported operator {line}; left as it is", file=sys.stderr)


def open_rewrite(args: argparse.Namespace, name: str) -> tuple[Path, Path, Any, bool]:
    """The start of a command that rewrites IN into OUT (``name`` is the
    command): check both paths before any work, load IN and refuse a model
    the passes cannot take.  Returns (IN, OUT, model, IN had external data)."""
    require_modules("onnx", "onnxscript")
    src, dst = Path(args.input), Path(args.output)
    readable_file(src, "an .onnx model")
    if src.resolve() == dst.resolve():
        raise CliError("the output must be a different file from the input")
    writable_output(dst, "model")  # before the work, not after it
    log(args, f"loading {src} ...")
    model, external = load_model(src)
    require_integrity(src, model)
    name_unsupported(src, model, name)
    return src, dst, model, external


def write_rewritten(args: argparse.Namespace, model, dst: Path, external: bool) -> str | None:
    """Write the rewritten model to OUT: with external data as
    ``--external-data`` / ``--no-external-data`` say, else as IN had it (or
    when too big for one file).  Returns the data file name, or None."""
    if args.external_data:
        want: bool | None = True
    elif args.no_external_data:
        want = False
    else:
        want = True if external else None
    return save_model(model, dst, external=want)
