"""CoreCLR 3.1's instance field layout on x64, recomputed from metadata: the second layer
of the metadata JIT-EE (`CoreClrLayout`, on top of `reader.typesys.TypeSystem`).

Why a module of its own: the layout rules (the type loader's `PlaceInstanceFields`,
`HandleExplicitLayout`, `EEClassLayoutInfo`) are one job, checked on their own against the
runtime (tests/reader/test_jitee.py, `run --compare-jitee`); the JIT-EE answers (`reader.
jitee`) only read their results.

Value-type and object layout (CoreCLR 3.1, x64)
------------------------------------------------
Layout follows the type loader of the runtime we check against (CoreCLR 3.1,
`MethodTableBuilder::PlaceInstanceFields` / `HandleExplicitLayout` and `EEClassLayoutInfo`),
including its field reordering; it is not approximated by declaration order.

* Sequential value types whose fields are all primitives, pointers or such structs
  ("managed sequential"), and blittable sequential/explicit types, use declaration order
  (explicit: FieldLayout offsets) with natural alignment capped by ClassLayout.PackingSize;
  the size is rounded up to the largest alignment unless ClassLayout.ClassSize is given
  (then max(ClassSize, end)). An empty struct is 1 byte. A `char` is blittable only in a
  Unicode/Auto-charset type, a `bool` never.
* Every other type (auto layout; sequential structs holding object references, e.g.
  `KeyValuePair<string,int>`; all ordinary classes) gets CoreCLR's *auto* layout: after
  the parent's fields (and, when the parent's end is not 8-aligned, small fields back-filled
  into the gap) come the 8-byte fields - object references first, in declaration order -
  then the 4-, 2- and 1-byte fields, then the embedded structs, each 8-aligned, each taking
  its size rounded up to 4. A value type's size is then rounded to 8 when above 8, else up
  to a power of two. So in auto layout fields are reordered, as CoreCLR does.
* Explicit-layout types that are not blittable: FieldLayout offsets; size the largest field
  end (or ClassSize when larger), rounded to 8 when the type holds object references.
* Objects: a method-table pointer (8 bytes) and then the instance fields of the base classes
  (Extends, walked across assemblies) and of the class. `field().offset` of a class's field
  counts from the object reference (so it includes the 8); of a value type's field, from
  the start of the value (add 8 for a boxed value). In a ReadyToRun image, a class whose base
  class (other than System.Object) lies in another module, or has a layout that depends on
  one, starts its fields at the base's end rounded up to 8 (CoreCLR's `NeedsAlignedBaseOffset`:
  R2R code must not depend on the exact size of another version bubble's types).
* Arrays and strings have no fields in metadata: an SZ array's length (int32) is at 8 and its
  elements at 16; a multi-dimensional array's length at 8, its bounds (rank lengths, then
  rank lower bounds, int32 each) at 16, its elements at 16 + 8*rank; a string's length
  (int32) at 8 and its UTF-16 chars at 12.
* Approximation: fields with marshalling info (`FieldMarshal`) count as blittable only when
  they are non-bool, non-char primitives or pointers (CoreCLR parses the marshalling
  descriptor). Blittability only decides the explicit-layout size rule and whether a
  sequential struct that is not managed-sequential keeps declaration order.
* Checked: the layouts of all 9,425 non-generic, non-interface types of the 165 framework
  assemblies (2,818 struct sizes, 22,389 instance field offsets) equal CoreCLR 3.1's; the test
  suite re-checks CoreLib, Python.Runtime, System.Private.Xml and a C# zoo of corner cases.

When a field's offset cannot be computed (its class or a base class cannot be loaded), `field`
still answers, with `offset=None` and the reason; the reader then uses the external symbol
`field_offset_symbol(token)` for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from llilc_eh.assembly.names import TokenKind
from llilc_eh.errors import ReaderError

from .types import TYPEDREF_SIZE, LayoutField
from .typesys import (
    _ET, _FD_HAS_FIELD_MARSHAL, _FD_STATIC, _PRIM_SIZE, _TD_AUTOCHAR, _TD_EXPLICIT, _TD_LAYOUT_MASK,
    _TD_SEQUENTIAL, _TD_STRING_FORMAT_MASK, _TD_UNICODE, TypeSystem, _base_sig, _Module, _Named, _Prim,
    _Var, _Wrapped,
)

# ClassLayout.PackingSize 0 means the default, CoreCLR 3.1's DEFAULT_PACKING_SIZE.
DEFAULT_PACKING_SIZE = 32


@dataclass(frozen=True)
class _Place:
    """How one instance field occupies memory (CoreCLR's per-field placement facts)."""

    size: int
    align: int
    gc: bool                 # an object reference itself (placed with the references)
    holds_gc: bool           # is or contains a GC reference
    by_value: bool           # an embedded struct (placed after the primitives in auto layout)
    managed_sequential: bool
    blittable: bool


@dataclass(frozen=True)
class _Layout:
    module: _Module
    rid: int
    kind: str
    size: int
    align: int
    gc: bool
    managed_sequential: bool
    blittable: bool
    depends_on_other_modules: bool
    offsets: tuple[tuple[int, int], ...]            # own instance fields: (field rid, offset)
    fields: tuple[tuple, ...]   # all instance fields incl. bases: (name, offset, size, gc, token, assembly)
    parent: "tuple[_Module, int, tuple] | None" = None

    def offset_of(self, rid: int) -> int | None:
        for r, off in self.offsets:
            if r == rid:
                return off
        return None


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


class CoreClrLayout(TypeSystem):
    """Value-type and object layouts of the compiled assembly's types and of those it
    references, as CoreCLR 3.1 lays them out (the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # complete layouts only (see TypeSystem); the types being laid out, to catch a cycle
        self._layouts: dict[tuple, _Layout] = {}
        self._layout_busy: set[tuple] = set()

    def _place(self, rt, char_blittable: bool = False, marshal: bool = False) -> _Place:
        """Placement facts of a field of type `rt`."""
        rt = self._norm(rt)
        if isinstance(rt, _Prim):
            et = rt.et
            if et in (_ET.STRING, _ET.OBJECT):
                return _Place(8, 8, True, True, False, False, False)
            if et == _ET.TYPEDBYREF:
                return _Place(TYPEDREF_SIZE, 8, False, True, True, False, False)
            size = _PRIM_SIZE.get(et)
            if size is None:
                raise ReaderError(f"a field cannot have type {et.name.lower()}", kind="bad-signature")
            blittable = et != _ET.BOOLEAN and (et != _ET.CHAR or (char_blittable and not marshal))
            return _Place(size, size, False, False, False, True, blittable)
        if isinstance(rt, _Wrapped):
            if rt.kind in ("ptr", "fnptr"):
                return _Place(8, 8, False, False, False, rt.kind == "ptr", True)
            if rt.kind == "byref":
                return _Place(8, 8, False, True, False, False, False)
            return _Place(8, 8, True, True, False, False, False)
        if isinstance(rt, _Var) or not rt.value_type:
            return _Place(8, 8, True, True, False, False, False)
        layout = self._named_layout(rt)
        return _Place(layout.size, layout.align, False, layout.gc, True,
                      layout.managed_sequential, layout.blittable and not marshal)

    def _named_layout(self, rt: _Named) -> _Layout:
        module, rid = self._resolve(rt.module, rt.token)
        return self._layout(module, rid, rt.args)

    def _layout(self, module: _Module, rid: int, args: tuple) -> _Layout:
        key = (id(module), rid, args)
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        if key in self._layout_busy:
            raise ReaderError(f"type {self._full_name(module, rid)} contains itself", kind="layout-cycle")
        self._layout_busy.add(key)
        try:
            layout = self._compute_layout(module, rid, args)
        finally:
            self._layout_busy.discard(key)
        self._layouts[key] = layout
        return layout

    def _compute_layout(self, module: _Module, rid: int, args: tuple) -> _Layout:
        token = (TokenKind.TYPE_DEF << 24) | rid
        row = module.row(token)
        flags = row.Flags
        is_value = self._def_is_value_type(module, rid)
        char_blittable = (flags & _TD_STRING_FORMAT_MASK) in (_TD_UNICODE, _TD_AUTOCHAR)
        # Own instance fields in declaration order, with their placement facts.
        own = []
        for frid in module.fields_of(rid):
            frow = module.row((TokenKind.FIELD << 24) | frid)
            if frow.Flags & _FD_STATIC:
                continue
            ftype = self._rt(module, module.names.field_signature(frid).type, args)
            place = self._place(ftype, char_blittable, bool(frow.Flags & _FD_HAS_FIELD_MARSHAL))
            own.append((frid, module.string(frow.Name_StringIndex), place))
        parent = None
        parent_layout = None
        base = self._extends(module, rid)
        if not is_value and base:
            parent_rt = self._rt(module, _base_sig(module, base), args)
            if isinstance(parent_rt, _Named):
                pmod, prid = self._resolve(parent_rt.module, parent_rt.token)
                parent_layout = self._layout(pmod, prid, parent_rt.args)
                parent = (pmod, prid, parent_rt.args)
        depends = any(p.by_value for _, _, p in own) and self._by_value_other_module(module, rid, args)
        parent_is_object = parent_layout is not None and parent_layout.parent is None
        if parent_layout is not None and not parent_is_object and (
                parent_layout.module is not module or parent_layout.depends_on_other_modules):
            depends = True
        packing, class_size = module.class_layout(rid)
        packing = packing or DEFAULT_PACKING_SIZE
        layout_kind = flags & _TD_LAYOUT_MASK
        gc = any(p.holds_gc for _, _, p in own) or (parent_layout is not None and parent_layout.gc)
        blittable = all(p.blittable for _, _, p in own) and layout_kind != 0 and \
            (parent_layout is None or parent_layout.blittable or parent_layout.size == 0)
        if is_value:
            if layout_kind == 0 and class_size and not own:
                # An auto-layout struct with a size and no fields is given that size (fixed buffers).
                return self._made(module, rid, "sequential", class_size, 1, False, True, True, depends, {}, own, None)
            managed_seq = layout_kind == _TD_SEQUENTIAL and all(p.managed_sequential for _, _, p in own)
            if layout_kind == _TD_SEQUENTIAL and (managed_seq or blittable):
                offsets, size, align = _sequential(own, 0, packing, class_size, None)
                return self._made(module, rid, "sequential", max(size, 1), align, gc, managed_seq, blittable,
                                  depends, offsets, own, None)
            if layout_kind == _TD_EXPLICIT:
                offsets = self._explicit_offsets(module, rid, own)
                if blittable:
                    _, size, align = _sequential(own, 0, packing, class_size, offsets)
                else:
                    size = max([offsets[f] + p.size for f, _, p in own] + [0])
                    if class_size and class_size >= size:
                        size = class_size
                    if gc:
                        size = _align_up(size, 8)
                    align = max([min(p.align, packing) for _, _, p in own] + [1])
                return self._made(module, rid, "explicit", max(size, 1), align, gc, False, blittable,
                                  depends, offsets, own, None)
            offsets, end = _auto(own, 0)
            size = max(end, 1)
            size = _align_up(size, 8 if size > 8 else _pow2(size))
            align = max([min(p.align, 8) for _, _, p in own] + [1])
            return self._made(module, rid, "auto", size, align, gc, False, False, depends, offsets, own, None)
        # A class: its fields follow the parent's.
        start = parent_layout.size if parent_layout is not None else 0
        if (parent_layout is not None and not parent_is_object and module.is_r2r
                and (parent_layout.module is not module or parent_layout.depends_on_other_modules)):
            start = _align_up(start, 8)        # NeedsAlignedBaseOffset
        if layout_kind == _TD_EXPLICIT:
            explicit = self._explicit_offsets(module, rid, own)
            slice_start = _align_up(start, 8) if gc else start
            offsets = {f: slice_start + off for f, off in explicit.items()}
            end = max([offsets[f] + p.size for f, _, p in own] + [slice_start])
            if gc:
                end = _align_up(end, 8)
            kind = "explicit"
        elif layout_kind == _TD_SEQUENTIAL and blittable and own:
            offsets, end, _ = _sequential(own, start, packing, class_size, None)
            kind = "sequential"
        else:
            offsets, end = _auto(own, start)
            kind = "class"
        align = 8
        return self._made(module, rid, kind, end, align, gc, False, blittable, depends, offsets, own,
                          (parent, parent_layout))

    def _by_value_other_module(self, module: _Module, rid: int, args: tuple) -> bool:
        for frid in module.fields_of(rid):
            if module.row((TokenKind.FIELD << 24) | frid).Flags & _FD_STATIC:
                continue
            ft = self._norm(self._rt(module, module.names.field_signature(frid).type, args))
            if isinstance(ft, _Named) and ft.value_type:
                layout = self._named_layout(ft)
                if layout.module is not module or layout.depends_on_other_modules:
                    return True
        return False

    def _explicit_offsets(self, module: _Module, rid: int, own) -> dict[int, int]:
        offsets = {}
        for frid, name, _ in own:
            off = module.field_offset(frid)
            if off is None:
                raise ReaderError(f"explicit-layout type {self._full_name(module, rid)} gives field {name} "
                                  f"no offset", kind="bad-layout")
            offsets[frid] = off
        return offsets

    @staticmethod
    def _made(module, rid, kind, size, align, gc, managed_seq, blittable, depends, offsets, own,
              parent_info) -> _Layout:
        fields = []
        parent = None
        if parent_info is not None:
            parent, parent_layout = parent_info
            if parent_layout is not None:
                fields.extend(parent_layout.fields)
        fields.extend((name, offsets[frid], p.size, p.holds_gc, (TokenKind.FIELD << 24) | frid, module.name)
                      for frid, name, p in own)
        fields.sort(key=lambda f: f[1])
        return _Layout(module, rid, kind, size, align, gc, managed_seq, blittable, depends,
                       tuple((frid, offsets[frid]) for frid, _, _ in own), tuple(fields), parent)


def _layout_fields(layout: _Layout, extra: int) -> tuple[LayoutField, ...]:
    return tuple(LayoutField(n, off + extra, size, gc, tok, asm) for n, off, size, gc, tok, asm in layout.fields)


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _sequential(own, start: int, packing: int, class_size: int, explicit: dict | None):
    """CoreCLR's layout for sequential (and blittable explicit) types: fields in declaration
    order (or at their explicit offsets), each aligned to min(natural, packing); the size is
    ClassSize when larger, else the end rounded up to the largest alignment."""
    offsets = {}
    cur = start
    largest = 1
    total = start
    for frid, _, p in own:
        a = max(1, min(p.align, packing))
        largest = max(largest, a)
        if explicit is None:
            cur = _align_up(cur, a)
            offsets[frid] = cur
            cur += p.size
            end = offsets[frid] + p.size
        else:
            offsets[frid] = explicit[frid]
            end = explicit[frid] + p.size
        total = max(total, end)
    if class_size:
        total = max(class_size + start, total)
    else:
        total = _align_up(total, largest)
    return offsets, total, largest


def _auto(own, start: int):
    """CoreCLR 3.1's `PlaceInstanceFields` for x64: returns ({field rid: offset}, end)."""
    offsets: dict[int, int] = {}
    log2 = {1: 0, 2: 1, 4: 2, 8: 3}
    prims = [(frid, p) for frid, _, p in own if not p.by_value]
    counts = [0, 0, 0, 0]
    for _, p in prims:
        counts[log2[p.size]] += 1
    pos = start
    placed: set[int] = set()
    if pos % 8:
        # Back-fill the gap after an unaligned parent with the smaller fields.
        i = 0
        while i < 3:
            if pos % (1 << (i + 1)) == 0:
                i += 1
                continue
            if not any(counts[j] for j in range(i + 1, 4)):
                break
            j = i
            while j >= 0 and counts[j] == 0:
                j -= 1
            if j < 0:
                break
            i = j
            frid = next(f for f, p in prims if log2[p.size] == i and f not in placed)
            pos = _align_up(pos, 1 << i)
            offsets[frid] = pos
            placed.add(frid)
            pos += 1 << i
            counts[i] -= 1
            i += 1
    starts = [0, 0, 0, 0]
    for i in (3, 2, 1, 0):
        if counts[i] == 0:
            continue
        pos = _align_up(pos, min(1 << i, 8))
        starts[i] = pos
        pos += counts[i] << i
    # Object references take the front of the 8-byte region, in declaration order.
    gc_next = starts[3]
    next_of = list(starts)
    next_of[3] = starts[3] + 8 * sum(1 for f, p in prims if p.gc and f not in placed)
    for frid, p in prims:
        if frid in placed:
            continue
        if p.gc:
            offsets[frid] = gc_next
            gc_next += 8
        else:
            k = log2[p.size]
            offsets[frid] = next_of[k]
            next_of[k] += p.size
    for frid, _, p in own:
        if p.by_value:
            pos = _align_up(pos, 8)
            offsets[frid] = pos
            pos += _align_up(p.size, 4)
    return offsets, pos

