## C = alpha * A * B + beta * C, a tiled, register-blocked matrix product (the design of
## autotuned GEMM kernels in the literature: work-group tiles staged in local memory, a tile of C
## per work-item held in registers, vector loads, tunable thread layouts).
##
## Storage (all row-major, sizes padded by the host to multiples of the tiles):
##   at  K x M   A transposed (A stored column-major), so a tile of A is contiguous along m
##   b   K x N
##   c   M x N
## Variables (checked by operations/gemm.py):
##   real               float or double
##   M, N, K            padded sizes
##   MWG, NWG, KWG      the work-group's tile of C (MWG x NWG) and its depth in k per step
##   MDIMC, NDIMC       work-items per work-group along m and n (the work-group is NDIMC x MDIMC)
##   MDIMA, NDIMB       how the work-group is laid out to load a tile of A (MDIMA along m) and
##                      of B (NDIMB along n)
##   KWI                unrolling of the k loop
##   VWM, VWN           vector width of loads and stores along m and n (elements)
##   STRM, STRN         0: a work-item's rows (columns) of C are contiguous; 1: strided, so that
##                      neighbouring work-items touch neighbouring vectors
##   SA, SB             stage the tiles of A (B) in local memory, or read them from global memory
<%
    MWI, NWI = MWG // MDIMC, NWG // NDIMC
    MVI, NVI = MWI // VWM, NWI // VWN
    THREADS = MDIMC * NDIMC
    KDIMA, KDIMB = THREADS // MDIMA, THREADS // NDIMB
    KWA, KWB = KWG // KDIMA, KWG // KDIMB
    MVA, NVB = MWG // (MDIMA * VWM), NWG // (NDIMB * VWN)
    size = 4 if real == "float" else 8
    comps = "xyzw"

    def pieces(width):
        """How a vector of `width` elements is loaded: (element offset, piece width) pairs of at
        most 16 bytes each."""
        step = min(width, 16 // size)
        return [(o, step) for o in range(0, width, step)]

    def vtype(w):
        return real if w == 1 else f"{real}{w}"

    def load(dst, base, space, ptr, index, width):
        """Statements loading ptr[index .. index + width) into dst[base .. base + width)."""
        out = []
        for off, w in pieces(width):
            if w == 1:
                out.append(f"{dst}[{base + off}] = {ptr}[{index} + {off}];")
            else:
                assign = " ".join(f"{dst}[{base + off + e}] = v.{comps[e]};" for e in range(w))
                out.append(f"{{ const {vtype(w)} v = *(({space} const {vtype(w)} *) "
                           f"({ptr} + {index} + {off})); {assign} }}")
        return "\n".join(out)

    def store(ptr, index, src, width):
        out = []
        for off, w in pieces(width):
            if w == 1:
                out.append(f"{ptr}[{index} + {off}] = {src}[{off}];")
            else:
                out.append(f"{{ {vtype(w)} t; " + " ".join(f"t.{comps[e]} = {src}[{off + e}];" for e in range(w))
                           + f" *((GLOBAL {vtype(w)} *) ({ptr} + {index} + {off})) = t; }}")
        return "\n".join(out)

    def row(mv):
        """First of the VWM rows (within the tile) of a work-item's vector mv."""
        return f"(ty * {MWI} + {mv * VWM})" if STRM == 0 else f"({mv * MDIMC * VWM} + ty * {VWM})"

    def col(nv):
        return f"(tx * {NWI} + {nv * VWN})" if STRN == 0 else f"({nv * NDIMC * VWN} + tx * {VWN})"
%>
% if backend == "cuda":
#define ALIGN16 __align__(16)
% else:
#define ALIGN16 __attribute__((aligned(16)))
% endif

KERNEL REQD_WORK_GROUP_SIZE(${NDIMC}, ${MDIMC}, 1)
void gemm(GLOBAL ${real} * RESTRICT c, GLOBAL const ${real} * RESTRICT at,
          GLOBAL const ${real} * RESTRICT b, ${real} alpha, ${real} beta)
{
    const unsigned int tx = get_local_id(0), ty = get_local_id(1);
% if SA or SB:
    const unsigned int tid = ty * ${NDIMC} + tx;
% endif
    const unsigned int m0 = get_group_id(1) * ${MWG}, n0 = get_group_id(0) * ${NWG};
% if SA:
    LOCAL_DECL ALIGN16 ${real} alm[${KWG * MWG}];
    const unsigned int ta = tid % ${MDIMA}, tka = tid / ${MDIMA};
% endif
% if SB:
    LOCAL_DECL ALIGN16 ${real} blm[${KWG * NWG}];
    const unsigned int tb = tid % ${NDIMB}, tkb = tid / ${NDIMB};
% endif
    ${real} acc[${MWI}][${NWI}];
% for i in range(MWI):
%   for j in range(NWI):
    acc[${i}][${j}] = (${real}) 0;
%   endfor
% endfor
    ${real} apm[${MWI}], bpm[${NWI}];

    for (unsigned int k0 = 0; k0 < ${K}; k0 += ${KWG}) {
% if SA:
        /* the work-group copies its tile of A (KWG x MWG) into local memory */
% for ka in range(KWA):
%   for va in range(MVA):
        {
            const unsigned int kk = ${ka * KDIMA} + tka, mm = (${va * MDIMA} + ta) * ${VWM};
            ${real} t[${VWM}];
            ${load("t", 0, "GLOBAL", "at", f"(k0 + kk) * {M} + m0 + mm", VWM)}
% for e in range(VWM):
            alm[kk * ${MWG} + mm + ${e}] = t[${e}];
% endfor
        }
%   endfor
% endfor
% endif
% if SB:
        /* and its tile of B (KWG x NWG) */
% for kb in range(KWB):
%   for vb in range(NVB):
        {
            const unsigned int kk = ${kb * KDIMB} + tkb, nn = (${vb * NDIMB} + tb) * ${VWN};
            ${real} t[${VWN}];
            ${load("t", 0, "GLOBAL", "b", f"(k0 + kk) * {N} + n0 + nn", VWN)}
% for e in range(VWN):
            blm[kk * ${NWG} + nn + ${e}] = t[${e}];
% endfor
        }
%   endfor
% endfor
% endif
% if SA or SB:
        BARRIER();
% endif
#pragma unroll ${KWI}
        for (unsigned int k = 0; k < ${KWG}; ++k) {
% for mv in range(MVI):
%   if SA:
            ${load("apm", mv * VWM, "LOCAL", "alm", f"k * {MWG} + {row(mv)}", VWM)}
%   else:
            ${load("apm", mv * VWM, "GLOBAL", "at", f"(k0 + k) * {M} + m0 + {row(mv)}", VWM)}
%   endif
% endfor
% for nv in range(NVI):
%   if SB:
            ${load("bpm", nv * VWN, "LOCAL", "blm", f"k * {NWG} + {col(nv)}", VWN)}
%   else:
            ${load("bpm", nv * VWN, "GLOBAL", "b", f"(k0 + k) * {N} + n0 + {col(nv)}", VWN)}
%   endif
% endfor
% for i in range(MWI):
%   for j in range(NWI):
            acc[${i}][${j}] += apm[${i}] * bpm[${j}];
%   endfor
% endfor
        }
% if SA or SB:
        BARRIER();
% endif
    }

    /* C = alpha * acc + beta * C, a vector of VWN elements at a time */
% for mv in range(MVI):
%   for e in range(VWM):
%     for nv in range(NVI):
    {
        const unsigned int r = m0 + ${row(mv)} + ${e}, cc = n0 + ${col(nv)};
        ${real} out[${VWN}];
        if (beta != (${real}) 0) {
            ${real} old[${VWN}];
            ${load("old", 0, "GLOBAL", "c", f"r * {N} + cc", VWN)}
% for j in range(VWN):
            out[${j}] = alpha * acc[${mv * VWM + e}][${nv * VWN + j}] + beta * old[${j}];
% endfor
        } else {
% for j in range(VWN):
            out[${j}] = alpha * acc[${mv * VWM + e}][${nv * VWN + j}];
% endfor
        }
        ${store("c", f"r * {N} + cc", "out", VWN)}
    }
%     endfor
%   endfor
% endfor
}

## Copies a rows x cols block between row-major matrices of different leading dimensions, filling
## the rest of the destination (dst_rows x dst_cols) with zeros: padding to and from tile sizes.
KERNEL void pad_copy(GLOBAL ${real} * RESTRICT dst, GLOBAL const ${real} * RESTRICT src,
                     unsigned int rows, unsigned int cols, unsigned int src_ld,
                     unsigned int dst_rows, unsigned int dst_cols)
{
    const unsigned int j = get_global_id(0), i = get_global_id(1);
    if (i < dst_rows && j < dst_cols)
        dst[i * dst_cols + j] = (i < rows && j < cols) ? src[i * src_ld + j] : (${real}) 0;
}
