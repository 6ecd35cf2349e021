"""Values and messages between the grader's processes and a student's, as data only.

Values cross as JSON, never pickled: numbers, strings, bytes, lists, tuples,
dicts, numpy arrays and scalars, dataclasses (remade only from trusted data);
functions become callback numbers; anything else becomes an opaque stand-in
with its type's name and repr. `special` hooks let the two ends add their own
kinds (the device objects of grader.platform.remote). A message is an 8-byte
length and a JSON object.
"""
from __future__ import annotations

import base64
import builtins
import contextlib
import dataclasses
import importlib
import io
import json
import struct

import numpy as np

MAX_MESSAGE = 256 << 20          # bytes: a larger message is not read


class StudentException(Exception):
    """Base of the exceptions the student's code raised, remade on this side under their own names."""


class ProcessEnded(StudentException, RuntimeError):
    """The student's process ended (or sent something unreadable) before answering."""


def raised(type_name: str, message: str, bases: dict | None = None) -> StudentException:
    """An exception of the student's type name: a subclass of `bases[type_name]` or of the built-in of that
    name where there is one (so that `except NotImplementedError` still matches)."""
    base = (bases or {}).get(type_name) or getattr(builtins, type_name, None)
    namespace = {"__str__": lambda self: message}
    if isinstance(base, type) and issubclass(base, Exception):
        with contextlib.suppress(TypeError):       # a built-in whose constructor wants more (UnicodeDecodeError)
            return type(type_name[:100], (StudentException, base), namespace)(message)
    return type(type_name[:100], (StudentException,), namespace)(message)


class Opaque:
    """A value that does not cross as data: its type's name and repr only."""

    def __init__(self, text: str):
        self._text = text

    def __repr__(self) -> str:
        return self._text


def npy(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode()


def from_npy(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def encode(value, callbacks: dict | None = None, special=None):
    """`value` as JSON-able data; functions become callback numbers in `callbacks` (None: opaque);
    `special(value)` may encode a value first (None: not one of its kinds)."""
    if special is not None and (found := special(value)) is not None:
        return found
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [encode(v, callbacks, special) for v in value]
        return items if isinstance(value, list) else {"$t": "tuple", "items": items}
    if isinstance(value, dict):
        return {"$t": "dict", "items": [[encode(k, callbacks, special), encode(v, callbacks, special)]
                                        for k, v in value.items()]}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {"$t": "ndarray", "npy": npy(value)}
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return {"$t": "scalar", "npy": npy(np.asarray(value))}
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return {"$t": "dtype", "str": np.dtype(value).str}
    if isinstance(value, bytes):
        return {"$t": "bytes", "b64": base64.b64encode(value).decode()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"$t": "dataclass", "class": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode(getattr(value, f.name), callbacks, special)
                           for f in dataclasses.fields(value)}}
    if callable(value) and not isinstance(value, type) and callbacks is not None:
        callbacks[len(callbacks)] = value
        return {"$t": "callback", "id": len(callbacks) - 1}
    try:
        text = repr(value)[:2000]
    except Exception:                 # the student's __repr__
        text = "<unprintable>"
    return {"$t": "opaque", "type": type(value).__name__[:100], "repr": text}


def decode(data, call_back=None, trusted: bool = False, special=None):
    """The value `data` encodes. A callback becomes a function that calls `call_back(id, args, kwargs)`;
    dataclasses are remade only from `trusted` data (what the grader sent), else they are opaque;
    `special(tag, item, walk)` decodes first the kinds it knows (None: not one of them)."""
    def walk(x):
        if isinstance(x, list):
            return [walk(v) for v in x]
        if not isinstance(x, dict):
            return x
        tag = x.get("$t")
        if special is not None and (found := special(tag, x, walk)) is not None:
            return found
        if tag == "tuple":
            return tuple(walk(v) for v in x["items"])
        if tag == "dict":
            return {walk(k): walk(v) for k, v in x["items"]}
        if tag == "ndarray":
            return from_npy(x["npy"])
        if tag == "scalar":
            return from_npy(x["npy"])[()]
        if tag == "dtype":
            return np.dtype(str(x["str"]))
        if tag == "bytes":
            return base64.b64decode(x["b64"])
        if tag == "callback" and call_back is not None:
            number = int(x["id"])
            return lambda *args, **kwargs: call_back(number, args, kwargs)
        if tag == "dataclass" and trusted:
            module, _, name = x["class"].partition(":")
            return getattr(importlib.import_module(module), name)(**{k: walk(v) for k, v in x["fields"].items()})
        if tag == "dataclass":
            return Opaque(f"<{x['class']}>")
        return type(str(x.get("type", "object")), (Opaque,), {})(str(x.get("repr", "")))
    return walk(data)


def send(stream, message: dict) -> None:
    data = json.dumps(message).encode()
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def receive(stream) -> dict | None:
    """The next message, or None when the stream ended; ValueError for what is not a message."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    size = struct.unpack("<Q", head)[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"a message of {size} bytes (at most {MAX_MESSAGE} are read)")
    data = stream.read(size)
    if len(data) < size:
        return None
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError("not a message")
    return message
