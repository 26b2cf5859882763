## Wilson dslash on one parity: out(x) = [x_in(x) + a *] sum_mu (1 -+ gamma_mu) U psi(x+mu) + (1 +- gamma_mu) U^dag psi(x-mu)
## Variables (validated by operations/lqcd/dslash.py):
##   real, cplx        "float"/"cfloat" or "double"/"cdouble": the arithmetic's types
##   half              (optional, default False) half precision storage (real, cplx are then
##                     float, cfloat): spinors as 16-bit fixed point (chalf) with one float norm
##                     per site (the largest |component|: value = stored * norm / half_max),
##                     a site's components in groups of four (16 bytes: half.py),
##                     each spinor argument followed by its norms; links as 16-bit fixed point,
##                     component k of a link's parameters scaled by link_scales[k] (half.py)
##   half_max          (with half) the largest stored magnitude
##   link_scales       (with half) per link parameter, what its stored value is multiplied by
##   dims              (X, Y, Z, T), all even
##   reconstruct       18, 12 or 8: how links are stored
##   choice_step       (with reconstruct 8) gauge.CHOICE_STEP: the offset per choice index on
##                     the 8-parameter form's phase parameters
##   t_boundary        +1 or -1: factor on hops across the time boundary
##   blocks            per direction the 2x2 upper-right block A of gamma_mu, entries "0", "1", "-1", "i", "-i"
##   wgs               work-group size
##   fast_math         (optional, default False) the 8-parameter reconstruction's square roots
##                     and division from the hardware's fast approximations (single precision
##                     arithmetic only)
##   half_bits         (optional, with half) 16-bit integers to floats by bit arithmetic (half.mako)
##   domain            (optional) (bx, by, bz, bt): Schwarz domains (Dirichlet blocks, each
##                     extent dividing the lattice's): hops that leave a domain are dropped
##   dirichlet_edges   (optional, with domain) 4 flags: directions in which the lattice's own
##                     edges are Dirichlet too (a domain as long as the lattice then does not
##                     wrap around: one rank's part of a partitioned lattice)
##   min_blocks        (optional, default 0: none) CUDA: __launch_bounds__'s minimum resident
##                     blocks per multiprocessor (caps the registers per thread)
##   variants          (parity, dagger, xpay) triples: the kernels this program holds; with
##                     half, (parity, dagger, xpay, storage): storage says per spinor argument
##                     (out, in, x_in) "h" (16-bit) or "s" (single precision complex), e.g.
##                     "hsh"; kernel names end in _<storage>
##   dist              (optional) one rank's block of a partitioned lattice (dims are then the
##                     block's): partitioned (4 flags), t_signs (forward, backward: -1 where a
##                     time hop from the block's edge crosses the antiperiodic boundary),
##                     region ("all", "interior": sites with no hop off the block, "exterior":
##                     the sites listed in `sites`), ghost_offsets {(mu, step): offset} and
##                     link_offsets {(mu, link parity): offset} into the ghost buffers,
##                     face_sites (sites of one parity on a face, per direction). See
##                     operations/lqcd/partition.py for the face order.
## Layout: spinors (12, V/2) complex per parity, component = 3 * spin + colour; links
## (4, 2, n, V/2): direction, parity, component (complex for 18/12, real for 8), site.
<%
    X, Y, Z, T = dims
    VH = X * Y * Z * T // 2
    C = cplx
    ncomp = {18: 9, 12: 6, 8: 8}[reconstruct]

    def times(coef, v):
        """coef * v for coef in 1, -1, i, -i (v a variable name)."""
        return {"1": v, "-1": f"{C}_new(-{v}.x, -{v}.y)",
                "i": f"{C}_new(-{v}.y, {v}.x)", "-i": f"{C}_new({v}.y, -{v}.x)"}[coef]

    def neg(coef):
        return {"1": "-1", "-1": "1", "i": "-i", "-i": "i"}[coef]

    def conj(coef):
        return {"1": "1", "-1": "-1", "i": "-i", "-i": "i"}[coef]

    def nonzero(row):
        """(column, coefficient) of the one non-zero entry of a row of A."""
        [(j, c)] = [(j, c) for j, c in enumerate(row) if c != "0"]
        return j, c

    dist = context.get("dist", None)
    half = context.get("half", False)
    fast_math = context.get("fast_math", False)
    min_blocks = context.get("min_blocks", 0)
    if fast_math and real != "float":
        raise ValueError("fast_math needs single precision arithmetic")
    if backend == "cuda" and min_blocks:
        bounds = f"__launch_bounds__({wgs}, {min_blocks})"
    else:
        bounds = f"REQD_WORK_GROUP_SIZE({wgs}, 1, 1)"
    # SQRT is applied to arguments >= 0 only
    if fast_math and backend == "cuda":
        SQRT, RSQRT, RECIP = "fast_sqrt", "rsqrtf", "__frcp_rn"
    elif fast_math:
        SQRT, RSQRT, RECIP = "native_sqrt", "native_rsqrt", "native_recip"
    else:
        SQRT, RSQRT, RECIP = "sqrt", "1 / sqrt", "1 / "
    if half and dist is not None:
        raise ValueError("half precision storage is not distributed yet")
    domain = context.get("domain", None)
    dirichlet_edges = context.get("dirichlet_edges", None) or (False,) * 4
    if domain is not None and dist is not None:
        raise ValueError("Schwarz domains of a distributed block are not built yet")
    G = ("short" if reconstruct == 8 else "chalf") if half else (real if reconstruct == 8 else C)
    half_max = context.get("half_max", None)
    link_scales = context.get("link_scales", None)
    choice_step = context.get("choice_step", None)

    def link8_scale(k):
        return f"{link_scales[k]!r}f"

    def spinor_in(array, index, sixteen):
        """Statements loading the 12 components of ``array`` at ``index`` into psi
        (``sixteen``: the argument is in 16-bit storage)."""
        if sixteen:  # a site's four-component groups, one 16-byte load each (half.py's layout)
            return (f"{{ const float s_ = {array}_norm[{index}] * {1 / half_max!r}f;\n"
                    f"          for (int g = 0; g < 3; g++) {{\n"
                    f"            const int4 w_ = ((GLOBAL const int4 *) {array})[g * VH + {index}];\n"
                    f"            psi[4 * g] = word_to_cfloat(w_.x, s_); psi[4 * g + 1] = word_to_cfloat(w_.y, s_);\n"
                    f"            psi[4 * g + 2] = word_to_cfloat(w_.z, s_); psi[4 * g + 3] = word_to_cfloat(w_.w, s_); }} }}")
        return f"for (int k = 0; k < 12; k++) psi[k] = {array}[k * VH + {index}];"

    def link_entry(expr):  # 18 and 12 parameters: every entry has one scale
        return f"chalf_to_cfloat({expr}, {link_scales[0]!r}f)" if half else expr

    def spinor_params(name, const, sixteen):
        q = "const " if const else ""
        if not sixteen:
            return f"GLOBAL {q}{C} * RESTRICT {name}"
        return f"GLOBAL {q}chalf * RESTRICT {name}, GLOBAL {q}float * RESTRICT {name}_norm"

    def storage_of(variant):
        """Per spinor argument (out, in, x_in), whether it is in 16-bit storage: half
        templates name it per variant ("h" or "s" each: half or single storage), the others
        have none."""
        if not half:
            return False, False, False
        storage = variant[3] if len(variant) > 3 else "hhh"
        return tuple(c == "h" for c in storage)

    def face_index(mu):
        """The face index of the site's other three coordinates (partition.py's order)."""
        names = [v for nu, v in enumerate("xyzt") if nu != mu]
        ext = [n for nu, n in enumerate(dims) if nu != mu]
        return f"((({names[2]} * {ext[1]}u + {names[1]}) * {ext[0]}u + {names[0]}) >> 1)"
%>
#define VH ${VH}u
% if half:
<%include file="half.mako"/>
% endif

<%def name="load_link(dest, mu, parity, site)">\
    /* ${dest} = U_${mu} at parity ${parity}, checkerboard site ${site} (reconstruct ${reconstruct}) */
% if reconstruct == 8:
    {
        ${real} p[8];
    % for k in range(8):
        p[${k}] = gauge[(${(mu * 2 + parity) * 8 + k}u) * VH + ${site}]${f" * {link8_scale(k)}" if half else ""};
    % endfor
        reconstruct8(p, ${dest});
    }
% else:
    % for k in range(ncomp):
    ${dest}[${k}] = ${link_entry(f"gauge[({(mu * 2 + parity) * ncomp + k}u) * VH + {site}]")};
    % endfor
    % if reconstruct == 12:
    third_row(${dest});
    % endif
% endif
</%def>

<%def name="load_ghost_link(dest, offset, fh, index)">\
    /* ${dest} = a backward neighbour's link, from the ghost links (reconstruct ${reconstruct};
       never half: a distributed dslash is single or double) */
% if reconstruct == 8:
    {
        ${real} p[8];
    % for k in range(8):
        p[${k}] = gauge_ghost[${offset + k * fh}u + ${index}];
    % endfor
        reconstruct8(p, ${dest});
    }
% else:
    % for k in range(ncomp):
    ${dest}[${k}] = gauge_ghost[${offset + k * fh}u + ${index}];
    % endfor
    % if reconstruct == 12:
    third_row(${dest});
    % endif
% endif
</%def>

/* row 2 = conj(row 0 x row 1): the links are in SU(3) */
DEVICE_FN void third_row(${C} *u)
{
    u[6] = ${C}_conj(${C}_sub(${C}_mul(u[1], u[5]), ${C}_mul(u[2], u[4])));
    u[7] = ${C}_conj(${C}_sub(${C}_mul(u[2], u[3]), ${C}_mul(u[0], u[5])));
    u[8] = ${C}_conj(${C}_sub(${C}_mul(u[0], u[4]), ${C}_mul(u[1], u[3])));
}

% if reconstruct == 8:
/* conj(a x e_c) / |a x e_c| for the unit axis e_c; |a x e_c|^2 = 1 - |a_c|^2 */
DEVICE_FN void axis_cross(const ${C} *a, int c, ${C} *e)
{
    const ${C} zero = ${C}_new(0, 0);
    if (c == 0)      { e[0] = zero; e[1] = ${C}_conj(a[2]); e[2] = ${C}_scale(${C}_conj(a[1]), -1); }
    else if (c == 1) { e[0] = ${C}_scale(${C}_conj(a[2]), -1); e[1] = zero; e[2] = ${C}_conj(a[0]); }
    else             { e[0] = ${C}_conj(a[1]); e[1] = ${C}_scale(${C}_conj(a[0]), -1); e[2] = zero; }
    const ${real} inv = ${RSQRT}(1 - ${C}_abs2(a[c]));
    e[0] = ${C}_scale(e[0], inv); e[1] = ${C}_scale(e[1], inv); e[2] = ${C}_scale(e[2], inv);
}

DEVICE_FN void cross_conj(const ${C} *a, const ${C} *b, ${C} *out)
{
    out[0] = ${C}_conj(${C}_sub(${C}_mul(a[1], b[2]), ${C}_mul(a[2], b[1])));
    out[1] = ${C}_conj(${C}_sub(${C}_mul(a[2], b[0]), ${C}_mul(a[0], b[2])));
    out[2] = ${C}_conj(${C}_sub(${C}_mul(a[0], b[1]), ${C}_mul(a[1], b[0])));
}
% if fast_math and backend == "cuda":

DEVICE_FN float fast_sqrt(float x) { return x > 0 ? x * rsqrtf(x) : 0.0f; }
% endif

/* exp(i theta) from t = tan(theta / 4): the square of (1 - t^2 + 2 i t) / (1 + t^2) */
DEVICE_FN ${C} phase_from_tangent(${real} t)
{
    const ${real} t2 = t * t;
    const ${real} d = ${RECIP}(1 + t2);
    const ${real} re = (1 - t2) * d, im = 2 * t * d;
    return ${C}_new(re * re - im * im, 2 * re * im);
}

/* The 8-parameter form of operations.lqcd.gauge.pack, rebuilt in registers: row 0 from its two
   small entries and the large one's phase; row 1 in the basis (e1, e2) of row 0's complement;
   row 2 = conj(row0 x row1) = conj(a) e2 - conj(b) e1 for row 1 = a e1 + b e2. */
DEVICE_FN void reconstruct8(const ${real} *p, ${C} *u)
{
    const int k = (int) rint(p[4] * (${real}) ${repr(1 / choice_step)});
    const ${C} s0 = ${C}_new(p[0], p[1]);
    const ${C} s1 = ${C}_new(p[2], p[3]);
    const ${real} m = ${SQRT}(fmax((${real}) 0, 1 - ${C}_abs2(s0) - ${C}_abs2(s1)));
    const ${C} big = ${C}_scale(phase_from_tangent(p[4] - (${real}) ${repr(choice_step)} * k), m);
    ${C} r0[3];
    if (k == 0)      { r0[0] = big; r0[1] = s0; r0[2] = s1; }
    else if (k == 1) { r0[0] = s0; r0[1] = big; r0[2] = s1; }
    else             { r0[0] = s0; r0[1] = s1; r0[2] = big; }
    const int q = (int) rint(p[7] * (${real}) ${repr(1 / choice_step)});
    ${C} e1[3], e2[3];
    axis_cross(r0, q >> 1, e1);
    cross_conj(r0, e1, e2);
    const ${C} small = ${C}_new(p[5], p[6]);
    const ${real} l = ${SQRT}(fmax((${real}) 0, 1 - ${C}_abs2(small)));
    const ${C} large = ${C}_scale(phase_from_tangent(p[7] - (${real}) ${repr(choice_step)} * q), l);
    const ${C} a = (q & 1) ? small : large;
    const ${C} b = (q & 1) ? large : small;
    for (int j = 0; j < 3; j++)
    {
        u[j] = r0[j];
        u[3 + j] = ${C}_add(${C}_mul(a, e1[j]), ${C}_mul(b, e2[j]));
        u[6 + j] = ${C}_sub(${C}_conj_mul(a, e2[j]), ${C}_conj_mul(b, e1[j]));
    }
}
% endif

% for variant in variants:
<%
    parity, dagger, xpay = variant[:3]
    h_out, h_in, h_x = storage_of(variant)
    suffix = f"_{variant[3] if len(variant) > 3 else 'hhh'}" if half else ""
%>
% if dist is None:
KERNEL ${bounds} void dslash_p${parity}${"_dag" if dagger else ""}${"_xpay" if xpay else ""}${suffix}(
    ${spinor_params("out", False, h_out)}, ${spinor_params("in", True, h_in)},
    GLOBAL const ${G} * RESTRICT gauge,
    ${spinor_params("x_in", True, h_x)}, ${real} a)
{
    const unsigned int cb = get_global_id(0);
    if (cb >= VH)
        return;
% else:
KERNEL ${bounds} void dslash_dist_p${parity}${"_dag" if dagger else ""}${"_xpay" if xpay else ""}_${dist["region"]}(
    ${spinor_params("out", False, False)}, ${spinor_params("in", True, False)},
    GLOBAL const ${G} * RESTRICT gauge,
    ${spinor_params("x_in", True, False)}, ${real} a,
    ${spinor_params("ghost", True, False)},
    GLOBAL const ${G} * RESTRICT gauge_ghost,
    GLOBAL const unsigned int * RESTRICT sites, unsigned int nsites)
{
% if dist["region"] == "exterior":
    if (get_global_id(0) >= nsites)
        return;
    const unsigned int cb = sites[get_global_id(0)];
% else:
    const unsigned int cb = get_global_id(0);
    if (cb >= VH)
        return;
% endif
% endif
    unsigned int r = cb / ${X // 2}u;
    const unsigned int xh = cb - r * ${X // 2}u;
    const unsigned int y = r % ${Y}u;
    r /= ${Y}u;
    const unsigned int z = r % ${Z}u;
    const unsigned int t = r / ${Z}u;
    const unsigned int x = 2 * xh + ((${parity}u + y + z + t) & 1u);
% if dist is not None and dist["region"] == "interior":
<% edges = [f"{v} == 0u || {v} == {dims[mu] - 1}u" for mu, v in enumerate("xyzt") if dist["partitioned"][mu]] %>\
% if edges:
    if (${" || ".join(edges)})
        return;  /* a boundary site: the exterior kernel's, once the ghosts have arrived */
% endif
% endif
    ${C} acc[12];
    for (int k = 0; k < 12; k++)
        acc[k] = ${C}_new(0, 0);
    ${C} u[9];
    ${C} psi[12];
% for mu in range(4):
<%
    coord = "xyzt"[mu]
    extent = dims[mu]
%>
% for direction in (1, -1):
<%
    sigma = -direction if not dagger else direction   # (1 + sigma gamma_mu)
    if direction == 1:
        moved = f"({coord} + 1u == {extent}u ? 0u : {coord} + 1u)"
    else:
        moved = f"({coord} == 0u ? {extent - 1}u : {coord} - 1u)"
    c = {v: (moved if v == coord else v) for v in "xyzt"}
    A = blocks[mu]
%>\
<%
    ghosted = dist is not None and dist["partitioned"][mu] and dist["region"] != "interior"
    edge = (extent - 1) if direction == 1 else 0
    cut = domain is not None and (domain[mu] < extent or dirichlet_edges[mu])
    leaves = (f"{coord} % {domain[mu]}u == {domain[mu] - 1 if direction == 1 else 0}u"
              if cut else "")
%>\
% if cut:
    if (!(${leaves}))  /* a hop that leaves the Schwarz domain is dropped */
% endif
    {
        /* direction ${mu}, hop ${"+" if direction == 1 else "-"}: (1 ${"+" if sigma == 1 else "-"} gamma_${mu}) ${"U" if direction == 1 else "U^dagger"} psi */
% if ghosted:
        if (${coord} == ${edge}u)
        {   /* off the block: the neighbour's face, from the ghost zone */
            const unsigned int f = ${face_index(mu)};
% if direction == 1:
${load_link("u", mu, parity, "cb")}
% else:
${load_ghost_link("u", dist["link_offsets"][mu, 1 - parity], dist["face_sites"][mu], "f")}
% endif
            for (int k = 0; k < 12; k++)
                psi[k] = ghost[${dist["ghost_offsets"][mu, direction]}u + k * ${dist["face_sites"][mu]}u + f];
        }
        else
        {
% endif
        const unsigned int nb = ((((${c["t"]}) * ${Z}u + ${c["z"]}) * ${Y}u + ${c["y"]}) * ${X}u + ${c["x"]}) >> 1;
% if direction == 1:
${load_link("u", mu, parity, "cb")}
% else:
${load_link("u", mu, 1 - parity, "nb")}
% endif
        ${spinor_in("in", "nb", h_in)}
% if ghosted:
        }
% endif
        ${C} h[6];
% for s in range(2):
<% j, coef = nonzero(A[s]) %>\
    % for col in range(3):
        { const ${C} v = psi[${(2 + j) * 3 + col}]; h[${s * 3 + col}] = ${C}_add(psi[${s * 3 + col}], ${times(coef if sigma == 1 else neg(coef), "v")}); }
    % endfor
% endfor
% if mu == 3 and t_boundary == -1 and (dist is None or dist["t_signs"][0 if direction == 1 else 1] == -1):
        if (t == ${T - 1 if direction == 1 else 0}u)
            for (int k = 0; k < 6; k++)
                h[k] = ${C}_scale(h[k], -1);
% endif
        ${C} chi[6];
% for s in range(2):
    % for row in range(3):
    % if direction == 1:
        chi[${s * 3 + row}] = ${C}_add(${C}_add(${C}_mul(u[${row * 3}], h[${s * 3}]), ${C}_mul(u[${row * 3 + 1}], h[${s * 3 + 1}])), ${C}_mul(u[${row * 3 + 2}], h[${s * 3 + 2}]));
    % else:
        chi[${s * 3 + row}] = ${C}_add(${C}_add(${C}_conj_mul(u[${row}], h[${s * 3}]), ${C}_conj_mul(u[${3 + row}], h[${s * 3 + 1}])), ${C}_conj_mul(u[${6 + row}], h[${s * 3 + 2}]));
    % endif
    % endfor
% endfor
% for s in range(2):
<%
    # lower half += sigma * (A^dagger chi): row s of A^dagger is the conjugate of column s of A
    [(j, coef)] = [(jj, conj(A[jj][s])) for jj in range(2) if A[jj][s] != "0"]
    coef = coef if sigma == 1 else neg(coef)
%>\
    % for col in range(3):
        acc[${s * 3 + col}] = ${C}_add(acc[${s * 3 + col}], chi[${s * 3 + col}]);
        { const ${C} v = chi[${j * 3 + col}]; acc[${(2 + s) * 3 + col}] = ${C}_add(acc[${(2 + s) * 3 + col}], ${times(coef, "v")}); }
    % endfor
% endfor
    }
% endfor
% endfor
% if half and xpay:
    ${spinor_in("x_in", "cb", h_x)}
    for (int k = 0; k < 12; k++)
        acc[k] = ${C}_add(psi[k], ${C}_scale(acc[k], a));
% endif
% if h_out:
    /* the site's norm is its largest |component|: every stored one fits 16 bits */
    float m_ = 0;
    for (int k = 0; k < 12; k++)
        m_ = fmax(m_, fmax(fabs(acc[k].x), fabs(acc[k].y)));
    out_norm[cb] = m_;
    const float inv_ = m_ > 0 ? ${repr(float(half_max))}f / m_ : 0.0f;
    for (int g = 0; g < 3; g++)
        ((GLOBAL int4 *) out)[g * VH + cb] = int4_new(
            cfloat_to_word(acc[4 * g], inv_), cfloat_to_word(acc[4 * g + 1], inv_),
            cfloat_to_word(acc[4 * g + 2], inv_), cfloat_to_word(acc[4 * g + 3], inv_));
% else:
    for (int k = 0; k < 12; k++)
    {
% if xpay and not half:
        out[k * VH + cb] = ${C}_add(x_in[k * VH + cb], ${C}_scale(acc[k], a));
% else:
        out[k * VH + cb] = acc[k];
% endif
    }
% endif
}

% endfor
