"""Solver benchmarks: per-iteration overhead, double against mixed precision, and CuPy's CG.

Usage (GPU machine): AUTOTUNE_DB=<a copy of tune.db.example> python benchmarks/solvers.py [--json FILE]

1. 32^4, 12-parameter links, even-odd CG on M_pc^dag M_pc: the time of one iteration (the
   difference of a 40- and a 10-iteration run, over 30; the median of 7 such pairs) against the
   sum of the event-timed kernels an iteration launches (4 dslash, dot, axpy_norm_ratio and
   axpy_zpbx).
2. 32^4, kappa 0.15, 0.2 and 0.22: device-level even-odd CG to 1e-10, double against mixed
   precision with a single and with a half precision sloppy operator (whole solves, setup
   included, after a warm-up solve).
3. 16^4: our full-lattice CG on M^dag M against cupyx.scipy.sparse.linalg.cg on the same normal
   equations, with M assembled as a CSR matrix (double precision, both to a relative residual of
   1e-9 on the normal equations; device-level solve times, host conversions excluded).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

from autotune import accel
from operations import solvers
from operations.blas import BlasTemplate, DeviceRatio
from operations.lqcd import WilsonOperator, haar_field
from operations.lqcd.gamma import GAMMA
from operations.lqcd.wilson import SpinorField
from operations.reduce import ReduceTemplate

from timing import queue_time

KAPPA = 0.12
PAIRS = 7  # the per-iteration time is the median over this many (40 - 10)-iteration pairs


def spinor(dims, seed=0):
    x, y, z, t = dims
    rng = np.random.default_rng(seed)
    return rng.standard_normal((t, z, y, x, 4, 3)) + 1j * rng.standard_normal((t, z, y, x, 4, 3))


def iteration_overhead(context, u, precision):
    op = WilsonOperator(context, u, KAPPA, precision, 12, check=False)
    A = op.linear_operator("MpcdagMpc")
    b = context.to_device(op.queue, np.ones(A.size, op.dtype))
    pairs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        solvers.cg(A, b, 1e-300, 5)  # compile and warm up (a tolerance no solve reaches)
        for _ in range(PAIRS):
            runs = {}
            for n in (10, 40):
                start = time.perf_counter()
                solvers.cg(A, b, 1e-300, n)
                runs[n] = time.perf_counter() - start
            pairs.append((runs[40] - runs[10]) / 30)
    per_iteration = statistics.median(pairs)
    tq = context.create_tuning_command_queue()
    op_t = WilsonOperator(context, u, KAPPA, precision, 12, check=False, queue=tq)
    A_t = op_t.linear_operator("MpcdagMpc")
    p, ap, x, r = (context.allocate(A.size, op.dtype) for _ in range(4))
    for v in (p, ap, x, r):
        v.set(tq, np.ones(A.size, op.dtype))
    dot = ReduceTemplate(context, op.dtype, "dot").instantiate(tq, A.size)
    axpy_norm = BlasTemplate(context, op.dtype, "axpy_norm_ratio").instantiate(tq, A.size)
    ratio = DeviceRatio(1e-9, context.to_device(tq, np.ones(1)))
    zpbx = BlasTemplate(context, op.dtype, "axpy_zpbx").instantiate(tq, A.size)
    kernels = {
        "apply (4 dslash)": queue_time(tq, lambda: A_t.apply(ap, p), 5, 5),
        "dot": queue_time(tq, lambda: dot.enqueue([p, ap], {}, fetch=False), 10, 5),
        "axpy_norm_ratio": queue_time(tq, lambda: axpy_norm.enqueue([ap, r], {"a": ratio}, fetch=False),
                                      10, 5),
        "axpy_zpbx": queue_time(tq, lambda: zpbx.enqueue([x, p, r], {"a": 1e-9, "b": 0.5}, fetch=False), 10, 5),
    }
    total = sum(kernels.values())
    return {"precision": precision, "iteration_ms": per_iteration * 1e3,
            "iteration_ms_pairs": [t * 1e3 for t in pairs],
            "kernels_ms": {k: v * 1e3 for k, v in kernels.items()}, "kernel_sum_ms": total * 1e3,
            "overhead": per_iteration / total - 1}


def mixed_against_double(context, u, kappa):
    """Device-level even-odd CG on M_pc^dag M_pc to 1e-10: double against mixed precision,
    single sloppy ("mixed") and half sloppy ("mixed_half": the sloppy operator in 16 bits)."""
    high = WilsonOperator(context, u, kappa, "double", 12, check=False)
    A = high.linear_operator("MpcdagMpc")
    A_low = high.with_precision("single").linear_operator("MpcdagMpc")
    A_half = high.with_precision("half").linear_operator("MpcdagMpc")
    rng = np.random.default_rng(1)
    b = context.to_device(high.queue, rng.standard_normal(A.size) + 1j * rng.standard_normal(A.size))
    solvers.cg(A, b, 1e-3)
    solvers.cg_mixed(A, A_low, b, 1e-3)  # compile and warm up
    solvers.cg_mixed(A, A_half, b, 1e-3)
    out = {}
    for name, run in (("double", lambda: solvers.cg(A, b, 1e-10, 20000)),
                      ("mixed", lambda: solvers.cg_mixed(A, A_low, b, 1e-10, 20000)),
                      ("mixed_half", lambda: solvers.cg_mixed(A, A_half, b, 1e-10, 20000))):
        x, info = run()
        out[name] = {"seconds": info.seconds, "iterations": info.iterations,
                     "true_residual": info.true_residual, "reliable_updates": info.reliable_updates}
    out["speedup"] = out["double"]["seconds"] / out["mixed"]["seconds"]
    out["speedup_half"] = out["double"]["seconds"] / out["mixed_half"]["seconds"]
    return out


def wilson_coo(u, dims):
    """M = 1 - kappa D as (rows, cols, values) over (site, spin, colour), from the formula."""
    x_, y_, z_, t_ = dims
    shape = (t_, z_, y_, x_)
    volume = int(np.prod(shape))
    sites = np.arange(volume).reshape(shape)
    rows, cols, vals = [], [], []
    eye4 = np.eye(4)
    axes = {0: 3, 1: 2, 2: 1, 3: 0}
    tslice = np.broadcast_to(np.arange(t_)[:, None, None, None], shape)
    for mu in range(4):
        fwd = np.roll(sites, -1, axis=axes[mu])
        bwd = np.roll(sites, 1, axis=axes[mu])
        sign_f = np.where((mu == 3) & (tslice == t_ - 1), -1.0, 1.0).reshape(-1)
        sign_b = np.where((mu == 3) & (tslice == 0), -1.0, 1.0).reshape(-1)
        link_f = u[mu].reshape(volume, 3, 3)
        link_b = np.roll(u[mu], 1, axis=axes[mu]).reshape(volume, 3, 3).conj().transpose(0, 2, 1)
        for nb, sign, link, proj in ((fwd, sign_f, link_f, eye4 - GAMMA[mu]),
                                     (bwd, sign_b, link_b, eye4 + GAMMA[mu])):
            block = -KAPPA * sign[:, None, None] * np.einsum("ab,nij->naibj", proj, link).reshape(volume, 12, 12)
            r = (np.arange(volume)[:, None, None] * 12 + np.arange(12)[None, :, None]).repeat(12, axis=2)
            c = (nb.reshape(-1)[:, None, None] * 12 + np.arange(12)[None, None, :]).repeat(12, axis=1)
            rows.append(r.reshape(-1)), cols.append(c.reshape(-1)), vals.append(block.reshape(-1))
    rows.append(np.arange(12 * volume)), cols.append(np.arange(12 * volume))
    vals.append(np.ones(12 * volume, complex))
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)


def csr_wilson(cupy, sparse, u, dims):
    """M assembled as a CuPy CSR matrix."""
    rows, cols, vals = wilson_coo(u, dims)
    n = 12 * int(np.prod(dims))
    return sparse.coo_matrix((cupy.asarray(vals), (cupy.asarray(rows), cupy.asarray(cols))),
                             shape=(n, n)).tocsr()


def cupy_cg(linalg, normal, rhs, tolerance, maxiter):
    """cupyx's CG, whichever name (rtol or tol) this CuPy gives the tolerance."""
    import inspect

    name = "rtol" if "rtol" in inspect.signature(linalg.cg).parameters else "tol"
    return linalg.cg(normal, rhs, maxiter=maxiter, **{name: tolerance})


def against_cupy(context, dims):
    import cupy
    from cupyx.scipy import sparse
    from cupyx.scipy.sparse import linalg

    u = haar_field(dims, seed=5)
    b = spinor(dims, 2)
    op = WilsonOperator(context, u, KAPPA, "double", 12, check=False)
    A = op.linear_operator("MdagM")
    field = op.to_device(b)
    rhs_ours = context.allocate(A.size, op.dtype)
    op.apply_dagger(field, out=SpinorField(rhs_ours))  # M^dag b: the same normal equations
    solvers.cg(A, rhs_ours, 1e-4)
    x, info = solvers.cg(A, rhs_ours, 1e-9, 5000)
    m = csr_wilson(cupy, sparse, u, dims)
    mh = m.conj().T.tocsr()
    normal = linalg.LinearOperator(m.shape, matvec=lambda v: mh @ (m @ v), dtype=m.dtype)
    rhs = mh @ cupy.asarray(b.reshape(-1))
    cupy_cg(linalg, normal, rhs, 1e-4, 5)
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    xc, status = cupy_cg(linalg, normal, rhs, 1e-9, 5000)
    cupy.cuda.Device().synchronize()
    t_cupy = time.perf_counter() - start
    true = float(cupy.linalg.norm(rhs - normal.matvec(xc)) / cupy.linalg.norm(rhs))
    return {"dims": dims, "ours_seconds": info.seconds, "ours_normal_residual": info.true_residual,
            "ours_iterations": info.iterations, "cupy_seconds": t_cupy,
            "cupy_normal_residual": true, "cupy_nnz": int(m.nnz), "speedup": t_cupy / info.seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--big", default="32,32,32,32")
    parser.add_argument("--small", default="16,16,16,16")
    parser.add_argument("--kappas", type=float, nargs="+", default=[0.15, 0.2, 0.22])
    args = parser.parse_args()
    context = accel.create_some_context("cuda")
    big = tuple(int(v) for v in args.big.split(","))
    small = tuple(int(v) for v in args.small.split(","))
    u = haar_field(big, seed=4)
    result = {"device": context.device.describe(), "date": time.strftime("%Y-%m-%d")}
    result["overhead"] = [iteration_overhead(context, u, p) for p in ("single", "double")]
    print(json.dumps(result["overhead"]), flush=True)
    # The harder the system (kappa nearer its critical value, about 0.25 on a Haar field), the
    # more single-precision iterations share each double-precision reliable update.
    result["mixed"] = []
    for kappa in args.kappas:
        result["mixed"].append({"kappa": kappa, **mixed_against_double(context, u, kappa)})
        print(json.dumps(result["mixed"][-1]), flush=True)
    result["cupy"] = against_cupy(context, small)
    print(json.dumps(result["cupy"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
