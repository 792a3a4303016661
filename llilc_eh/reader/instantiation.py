"""An exact generic instantiation bound in the metadata JIT-EE: `!n` / `!!n` of the compiled
method made known types.

Why here: a method of a generic type or a generic method is, in the runtime, code per value-type
instantiation (`Pair<int>::Pick` and `Pair<long>::Pick` are two bodies; runtime/instantiation.py
reads which one is asked for). Its IL is the definition's, so its signatures, locals and tokens
name `!0` / `!!0`; without a binding the type system treats a generic parameter as an object
reference (`_Var`, what shared code sees). With one, `TypeSystem._rt` resolves a generic
parameter met in the compiled module's own signatures to the bound type -- only there: a type of
another module keeps its own arguments -- so sizes, field offsets of `Pair<!0>`, SysV
classification and the stack kinds of T-typed values are the instantiation's.

The answers that depend on the binding (type infos by signature, fields and methods by token:
their offsets and LLVM signatures) are cached per binding; the layouts of module-qualified types
are the same whoever asks and stay shared.

A type argument arrives as a plain description (no runtime objects in the reader):
("primitive", ElementType name), ("class",) -- an object reference --, or ("valuetype", file,
namespace, name, (arguments...)[, (enclosing type names...)]) for a value class of any assembly
(found by file, so that a `List<MyStruct>` compiled in CoreLib's pipeline can lay out the
program's struct; a nested one through its enclosing types, its name alone being ambiguous).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..assembly.names import TokenKind
from ..assembly.signatures import ElementType
from ..errors import ReaderError
from .typesys import _Module, _Named, _Prim


@dataclass(frozen=True)
class Binding:
    """The bound instantiation: the compiled method's owner TypeDef token, and the
    module-qualified type of each class and method type argument."""

    method_token: int
    owner_token: int
    class_args: tuple
    method_args: tuple


def binding_of(ts, method_token: int, class_args: tuple, method_args: tuple) -> Binding:
    """The Binding of MethodDef `method_token` of `ts`'s compiled assembly to the described
    type arguments (module docstring); ReaderError when one cannot be found."""
    owner = ts._main.names.method_owner(method_token & 0xFFFFFF)
    return Binding(method_token, owner, tuple(type_of(ts, a) for a in class_args),
                   tuple(type_of(ts, a) for a in method_args))


def type_of(ts, desc: tuple):
    """The module-qualified type of one described type argument."""
    kind = desc[0]
    if kind == "primitive":
        return _Prim(ElementType[desc[1]])
    if kind == "class":
        return _Prim(ElementType.OBJECT)
    if kind != "valuetype":
        raise ReaderError(f"type argument {desc!r}: unknown kind", kind="bad-instantiation")
    _, path, namespace, name, args, *nesting = desc
    module = _module_at(ts, path)
    rid = _nested(module, namespace, nesting[0], name) if nesting and nesting[0] else _typedef(module, namespace, name)
    return _Named(module, (TokenKind.TYPE_DEF << 24) | rid, True, tuple(type_of(ts, a) for a in args))


def _module_at(ts, path: str) -> _Module:
    real = os.path.realpath(path)
    module = ts._modules.get(real)
    if module is None:
        module = ts._modules[real] = _Module(ts._binder.assembly(Path(path)))
    return module


def _nested(module: _Module, namespace: str, enclosing: tuple, name: str) -> int:
    """The TypeDef rid of `namespace.Outer/.../name` in `module`."""
    rid = 0
    for i, part in enumerate((*enclosing, name)):
        found = module.find_typedef(namespace if i == 0 else "", part, rid)
        if found is None:
            raise ReaderError(f"type argument {namespace + '.' if namespace else ''}{'/'.join((*enclosing, name))}: "
                              f"no type {part} in {module.name}", kind="bad-instantiation")
        rid = found
    return rid


def _typedef(module: _Module, namespace: str, name: str) -> int:
    """The TypeDef rid of `namespace.name` in `module`: a top-level type, else the one nested
    type of that name (the runtime names a nested type without its enclosing one)."""
    rid = module.find_typedef(namespace, name)
    if rid is not None:
        return rid
    found = [r for r in range(1, module.typedef_count() + 1)
             if module.type_ns_name((TokenKind.TYPE_DEF << 24) | r) == (namespace, name)]
    if len(found) != 1:
        raise ReaderError(f"type argument {namespace + '.' if namespace else ''}{name}: {len(found)} types of "
                          f"that name in {module.name}", kind="bad-instantiation")
    return found[0]


__all__ = ["Binding", "binding_of", "type_of"]
