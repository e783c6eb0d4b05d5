"""Numba intrinsics shared by the compiled CPU kernels (``detect/_numba*.py``, ``segment/_numba*.py``):
the same code as Numba's ``min``/``max`` and ``np.empty``, emitted in place instead of through their
overloads, which compile a function of their own per argument type at the first call (measured: a
tenth of the segmentation kernels' compilation; 0.5 s of the first detection's); and two LLVM
operations Numba has no word for, a 16-wide compare (``_first_equal16``) and a prefetch
(``_prefetch``)."""

from __future__ import annotations

import operator

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["_empty", "_first_equal16", "_max", "_min", "_prefetch"]


def _binary(compare):
    """min or max of two numbers, as an intrinsic emitting the code of Numba's own min/max
    (``do_minmax``: same results, NaN rules included) without their overload resolution, which
    runs at every call site and compiles a function per argument type: a tenth of the kernels'
    compilation. Numba's min/max where ``do_minmax`` is not there."""
    try:
        from numba.cpython.builtins import do_minmax
    except ImportError:  # pragma: no cover (another Numba)
        return min if compare is operator.lt else max

    @intrinsic
    def minmax(typingctx, a, b):
        def codegen(context, builder, signature, args):
            return do_minmax(context, builder, list(signature.args), list(args), compare)

        return typingctx.unify_types(a, b)(a, b), codegen

    return minmax


_min, _max = _binary(operator.lt), _binary(operator.gt)


def _allocator():
    """``_empty(length, dtype)``: a new 1D C-contiguous array, as ``np.empty(length, dtype=dtype)``
    but emitted in place by an intrinsic (NRT allocation, no overflow check: lengths are box
    sizes), without ``np.empty``'s overload, which compiles a function of its own for every dtype
    and literal length (0.03-0.15 s each at the first segmentation). ``np.empty`` where Numba's
    array internals are not there."""
    try:
        from numba.np.arrayobj import make_array, populate_array
    except ImportError:  # pragma: no cover (another Numba)
        return njit(lambda length, dtype: np.empty(length, dtype=dtype))

    @intrinsic
    def empty(typingctx, length, dtype):
        array_type = types.Array(dtype.instance_type, 1, "C")

        def codegen(context, builder, signature, args):
            intp = context.get_value_type(types.intp)
            n = context.cast(builder, args[0], signature.args[0], types.intp)
            data_type = context.get_data_type(array_type.dtype)
            itemsize = context.get_constant(types.intp, context.get_abi_sizeof(data_type))
            align = context.get_constant(types.uint32, context.get_preferred_array_alignment(array_type.dtype))
            meminfo = context.nrt.meminfo_alloc_aligned(builder, builder.mul(n, itemsize), align)
            array = make_array(array_type)(context, builder)
            data = builder.bitcast(context.nrt.meminfo_data(builder, meminfo), data_type.as_pointer())
            populate_array(array, data=data, shape=cgutils.pack_array(builder, [n], ty=intp),
                           strides=cgutils.pack_array(builder, [itemsize], ty=intp), itemsize=itemsize,
                           meminfo=meminfo)
            return array._getvalue()

        return array_type(length, dtype), codegen

    return empty


_empty = _allocator()


def _element_address(context, builder, array_type, array, index, pointee):
    """The address of ``array[index]`` (a 1D C-contiguous array) as a pointer to ``pointee``."""
    data = context.make_array(array_type)(context, builder, value=array).data
    return builder.bitcast(builder.gep(data, [index]), pointee.as_pointer())


@intrinsic
def _first_equal16(typingctx, array, index, value):
    """``_first_equal16(array, index, value)``: the position (0-15) of the first of the 16
    elements ``array[index:index + 16]`` (uint32, C-contiguous, 1D) equal to ``value`` (a
    uint32), 16 where none is; the caller guarantees that the 16 elements lie inside ``array``.
    One vector load and compare (LLVM lowers it to the machine's vectors: AVX-512, AVX2, SSE,
    NEON) and a count of trailing zeros, where a scalar loop stops at a data-dependent
    element, a branch the predictor misses (measured: the turn's search for the first of a
    run's equal maxima, 2D 1024² radius 12, one thread, 23 -> 7 ms)."""
    if not (isinstance(array, types.Array) and array.dtype == types.uint32 and array.ndim == 1
            and array.layout == "C" and isinstance(index, types.Integer)
            and isinstance(value, types.Integer) and not value.signed and value.bitwidth <= 32):
        return None  # a uint32 value: a wider or signed one would be cut to 32 bits

    def codegen(context, builder, signature, args):
        word = ir.IntType(32)
        lanes = ir.VectorType(word, 16)
        loaded = builder.load(_element_address(context, builder, signature.args[0], args[0], args[1], lanes), align=4)
        wanted = context.cast(builder, args[2], signature.args[2], types.uint32)
        splat = builder.shuffle_vector(builder.insert_element(ir.Constant(lanes, ir.Undefined), wanted,
                                                              ir.Constant(word, 0)),
                                       ir.Constant(lanes, ir.Undefined), ir.Constant(lanes, [0] * 16))
        bits = builder.bitcast(builder.icmp_unsigned("==", loaded, splat), ir.IntType(16))
        first = builder.cttz(bits, ir.Constant(ir.IntType(1), 0))  # 16 where no bit is set
        return builder.zext(first, context.get_value_type(types.int64))

    return types.int64(array, index, value), codegen


@intrinsic
def _prefetch(typingctx, array, index):
    """``_prefetch(array, index)``: asks the CPU to bring the cache line of ``array[index]``
    (1D, C-contiguous) closer, for a read soon (``llvm.prefetch``; an index outside the
    array is harmless: a prefetch never faults). Used where the next reads are known but lie
    past what the CPU's out-of-order window sees: the turn's next item, one group of voters
    later (measured: 2D 1024² radius 12, one thread, turns 96 -> 75 ms)."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C"
            and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        byte = ir.IntType(8)
        address = _element_address(context, builder, signature.args[0], args[0], args[1], byte)
        word = ir.IntType(32)
        function = builder.module.declare_intrinsic(
            "llvm.prefetch", (), ir.FunctionType(ir.VoidType(), [byte.as_pointer(), word, word, word]))
        # read (0), keep in all cache levels (3), data cache (1)
        builder.call(function, [address, ir.Constant(word, 0), ir.Constant(word, 3), ir.Constant(word, 1)])
        return context.get_dummy_value()

    return types.none(array, index), codegen
