"""The CPU scorer's kernel (numba): exact MaxSim of float16 pages in float32, without the GIL.

One call a chunk of pages. Imported only where numba is (maxsim.py falls back to torch, then NumPy).

Each page is read in blocks of ROWS rows: the block is widened to float32 (F16C's conversion, exact for
subnormals too) into a few KiB that stay in L1, then every group of 24 query tokens is multiplied by it
in a register-blocked microkernel: 8 rows x 3 vectors of 8 tokens = 24 accumulators kept in registers
over all dimensions, each page element broadcast from L1 into fused multiply-adds, and the block's max
per token taken before anything leaves the registers. No transpose, no horizontal sums, no similarity
matrix in memory. The microkernel is written in LLVM IR (numba's auto-vectoriser kept the
accumulators in memory): on a Zen 4 core it scores a row for 20 query tokens in about 63 ns of CPU
time, against 143 ns for torch's widen + MKL product + amax, and beats MKL's large-product peak per
core (docs/performance.md)."""

from __future__ import annotations

import warnings
from typing import Any

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8  # float32 lanes of one vector: 256 bits (AVX2; AVX-512VL gives the 32 registers 27 of them need)
ROWS = 8  # page rows of a block: 8 rows x 3 vectors = 24 accumulators
GROUP = 3  # vectors of query tokens a block is multiplied by at once (24 tokens)


def _half_to_float(typingctx: Any, bits: Any) -> tuple[Any, Any]:
    """float16 bits -> float32 (LLVM's fpext: F16C's VCVTPH2PS, vectorised with the loop; exact)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


_widen: Any = intrinsic(_half_to_float)


def _microkernel(vectors: int) -> Any:
    """best[column : column + 8 * vectors] = max(best, that many query tokens' best over a block's ROWS rows).

    qt is (dim, width) float32 (query tokens in columns), block (ROWS, dim) float32, best (width,)."""

    def typer(typingctx: Any, qt: Any, column: Any, block: Any, best: Any) -> tuple[Any, Any]:
        return types.none(qt, types.intp, block, best), codegen

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        f32, i64 = ir.FloatType(), ir.IntType(64)
        vec = ir.VectorType(f32, LANES)
        qt = context.make_array(signature.args[0])(context, builder, args[0])
        dim, width = cgutils.unpack_tuple(builder, qt.shape, 2)
        block = context.make_array(signature.args[2])(context, builder, args[2]).data
        best = context.make_array(signature.args[3])(context, builder, args[3]).data
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{LANES}f32")
        first = builder.gep(qt.data, [args[1]])
        splat = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
        entry, loop, done = builder.block, builder.append_basic_block("block.loop"), builder.append_basic_block("block.done")
        builder.branch(loop)
        builder.position_at_end(loop)
        d = builder.phi(i64)
        d.add_incoming(ir.Constant(i64, 0), entry)
        sums = [builder.phi(vec) for _ in range(ROWS * vectors)]
        for s in sums:
            s.add_incoming(ir.Constant(vec, None), entry)
        row = builder.gep(first, [builder.mul(d, width)])
        q = [builder.load(builder.bitcast(builder.gep(row, [ir.Constant(i64, k * LANES)]), vec.as_pointer()), align=4)
             for k in range(vectors)]
        new = []
        for r in range(ROWS):
            x = builder.load(builder.gep(block, [builder.add(d, builder.mul(dim, ir.Constant(i64, r)))]))
            x = builder.shuffle_vector(builder.insert_element(ir.Constant(vec, ir.Undefined), x, ir.Constant(ir.IntType(32), 0)),
                                       ir.Constant(vec, ir.Undefined), splat)
            new += [builder.call(fma, [q[k], x, sums[r * vectors + k]]) for k in range(vectors)]
        following = builder.add(d, ir.Constant(i64, 1))
        d.add_incoming(following, builder.block)
        for s, v in zip(sums, new):
            s.add_incoming(v, builder.block)
        builder.cbranch(builder.icmp_signed("<", following, dim), loop, done)
        builder.position_at_end(done)
        out = builder.gep(best, [args[1]])
        for k in range(vectors):
            top = new[k]
            for r in range(1, ROWS):
                top = builder.select(builder.fcmp_ordered(">", new[r * vectors + k], top), new[r * vectors + k], top)
            at = builder.bitcast(builder.gep(out, [ir.Constant(i64, k * LANES)]), vec.as_pointer())
            old = builder.load(at, align=4)
            builder.store(builder.select(builder.fcmp_ordered(">", top, old), top, old), at, align=4)
        return context.get_dummy_value()

    typer.__name__ = typer.__qualname__ = f"_block_{vectors}"  # one name each: numba's cache tells them apart by it
    return intrinsic(typer)


_block_1: Any = _microkernel(1)
_block_2: Any = _microkernel(2)
_block_3: Any = _microkernel(GROUP)


def _score(bits: np.ndarray, starts: np.ndarray, ends: np.ndarray, qt: np.ndarray, out: np.ndarray) -> None:
    """out[p, t] = max over rows of page p (rows starts[p]..ends[p] of bits) of <query token t, row>."""
    dim, width = qt.shape
    block = np.empty((ROWS, dim), dtype=np.float32)
    best = np.empty(width, dtype=np.float32)
    whole = width // (GROUP * LANES) * (GROUP * LANES)
    rest = (width - whole) // LANES
    for p in range(len(starts)):
        start, end = starts[p], ends[p]
        best[:] = -np.inf
        for r in range(start, end, ROWS):
            last = min(r + ROWS, end) - 1
            for i in range(ROWS):
                source = min(r + i, last)  # a short block repeats its last row: no max changes
                for j in range(dim):
                    block[i, j] = _widen(bits[source, j])
            for column in range(0, whole, GROUP * LANES):
                _block_3(qt, column, block, best)
            if rest == 2:
                _block_2(qt, whole, block, best)
            elif rest == 1:
                _block_1(qt, whole, block, best)
        for t in range(out.shape[1]):
            out[p, t] = best[t]


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # NumbaWarning where no cache directory is writable
    try:
        _score_kernel = numba.njit(nogil=True, cache=True)(_score)
    except RuntimeError:  # "cannot cache function": compiled per process
        _score_kernel = numba.njit(nogil=True)(_score)


def query_columns(q_all: np.ndarray) -> np.ndarray:
    """Stacked query tokens (tokens, dim) as the kernel takes them: (dim, tokens rounded up to LANES), zeros after."""
    qt = np.zeros((q_all.shape[1], -(-len(q_all) // LANES) * LANES), dtype=np.float32)
    qt[:, : len(q_all)] = q_all.T
    return qt


def score_pages(bits: np.ndarray, starts: np.ndarray, ends: np.ndarray, qt: np.ndarray, out: np.ndarray) -> None:
    """Each query token's best similarity in each page (out: (pages, tokens) float32, C-contiguous),
    for pages given by their row ranges in `bits` (the float16 vectors viewed as uint16), without the GIL."""
    _score_kernel(bits, starts, ends, qt, out)
