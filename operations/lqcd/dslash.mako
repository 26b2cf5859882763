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
##   choice_step       (with reconstruct 8) gauge.CHOICE_STEP: the spacing of the choices on
##                     the 8-parameter form's phase parameters
##   choice_counts     (with reconstruct 8) how many choices components 4 and 7 carry
##                     (gauge.CHOICES)
##   t_boundary        +1 or -1: factor on hops across the time boundary
##   blocks            per direction the 2x2 upper-right block A of gamma_mu, entries "0", "1", "-1", "i", "-i"
##   wgs               work-group size
##   fast_math         (optional, default False) the 8-parameter reconstruction's reciprocal
##                     square roots from the hardware's fast approximation (single precision
##                     arithmetic only; double precision uses rsqrt)
##   half_bits         (optional, with half) 16-bit integers to floats by bit arithmetic (half.mako)
##   project16         (optional, default "none"; with half) a 16-bit neighbour's spin projection
##                     added in integers before conversion (12 conversions a hop, not 24): "cvt"
##                     (conversion instructions) or "bits" (bit arithmetic); not with dist or for
##                     staged x neighbours (a tuned parameter of half precision since
##                     DslashTemplate.autotune_version 5; benchmarks/dslash_unpacking.py)
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
##                     block's): regions (the name of the file with the distributed kernels'
##                     own parts, dslash_regions.mako: included by that name, so that the
##                     single-GPU kernels' sources never hold it), partitioned (4 flags), t_signs (forward, backward: -1 where a
##                     time hop from the block's edge crosses the antiperiodic boundary),
##                     region ("all", "interior": sites with no hop off the block, "exterior":
##                     the sites listed in `sites`, "fused": both in one launch, the exterior's
##                     groups waiting for the faces' arrival counts; with interior_groups, the
##                     groups that cover every site), ghost_offsets {(mu, step): offset} and
##                     link_offsets {(mu, link parity): offset} into the ghost buffers,
##                     face_sites (sites of one parity on a face, per direction). See
##                     operations/lqcd/partition.py for the face order. With half: the ghost
##                     links in the arithmetic's precision (not 16-bit), and the ghost zone
##                     of a 16-bit input in 16 bits too (per face: the 3 x face_sites int4
##                     words of halo.mako's 16-bit pack, then the face_sites norms), of a
##                     single precision input in single precision.
##   link_groups       (optional, default one per parameter) dslash.link_groups: how many of a
##                     link's parameters each load reads
##   sites             (optional, default 1) sites per work-item: a work-group takes a block of
##                     consecutive sites, then the block the whole grid further on, and so on
##   dir_split         (optional, default 1) work-items per site (1, 2 or 4): each takes 4 /
##                     dir_split of the directions (the first wgs / dir_split work-items x
##                     and y, the next z and t, ...), the others' sums are added in local memory
##   stage             (optional, default False) the x neighbours (both hops) read from local
##                     memory, where the work-group first loads its block's neighbours together
## Not with dist: sites and stage keep their defaults there (dir_split is taken).
##   carveout          (optional, default -1) the L1/shared carve-out the template sets on the
##                     kernels (CUDA): named in the source, so that each carve-out is its own
##                     module (the setting belongs to a module's function, which equal sources share)
##   nrhs              (optional, default 1) right-hand sides a kernel takes (dslash_multi.py):
##                     out, in and x_in once each (out, out1, ...; in, in1, ...), each hop's
##                     link loaded once for all; with dir_split 1, not staged, not with dist.
##                     Kernel names end in _rhs<nrhs> when it is above 1
## Layout: spinors (12, V/2) complex per parity, component = 3 * spin + colour; links per
## direction and parity (n parameters: complex for 18/12, real for 8) in groups of
## link_groups: per group a block of V/2 sites, a site's group contiguous (groups of one:
## (4, 2, n, V/2), component-major).
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
    # reciprocal square roots of the 8-parameter form (arguments between 1/16 and 16)
    if real == "double":
        RSQRT = "rsqrt"  # within 1 ulp (CUDA; 2 in OpenCL): cheaper than 1 / sqrt, as exact
    elif fast_math:
        RSQRT = "rsqrtf" if backend == "cuda" else "native_rsqrt"
    else:
        RSQRT = "1 / sqrt"
    domain = context.get("domain", None)
    dirichlet_edges = context.get("dirichlet_edges", None) or (False,) * 4
    if domain is not None and dist is not None:
        raise ValueError("Schwarz domains of a distributed block are not built yet")
    G = ("short" if reconstruct == 8 else "chalf") if half else (real if reconstruct == 8 else C)
    GG = real if reconstruct == 8 else C  # the ghost links: never 16-bit
    half_max = context.get("half_max", None)
    link_scales = context.get("link_scales", None)
    choice_step = context.get("choice_step", None)
    choice_counts = context.get("choice_counts", None)
    choice_centres = [(n - 1) / 2 for n in choice_counts] if choice_counts else None

    def neg_c(v):
        return f"{C}_new(-{v}.x, -{v}.y)"

    def spinor_in(array, index, sixteen, factor=1.0, scale_into=None, staged=False):
        """Statements loading the 12 components of ``array`` at ``index`` into psi
        (``sixteen``: the argument is in 16-bit storage; ``factor`` multiplies its scale;
        ``scale_into``: a float variable that receives the scale, psi left in its units;
        ``staged``: from the local copy of the block's neighbours, entry ``index``)."""
        if staged and sixteen:
            scale = f"stagen_[{index}] * {factor / half_max!r}f"
            head = f"{scale_into} = {scale};\n        {{ const float s_ = 1.0f;\n" if scale_into else \
                f"{{ const float s_ = {scale};\n"
            return (head +
                    f"          for (int g = 0; g < 3; g++) {{\n"
                    f"            const int4 w_ = stagew_[g * {NS}u + {index}];\n"
                    f"            psi[4 * g] = word_to_cfloat(w_.x, s_); psi[4 * g + 1] = word_to_cfloat(w_.y, s_);\n"
                    f"            psi[4 * g + 2] = word_to_cfloat(w_.z, s_); psi[4 * g + 3] = word_to_cfloat(w_.w, s_); }} }}")
        if staged:
            return f"for (int k = 0; k < 12; k++) psi[k] = stage_[k * {NS}u + {index}];"
        if sixteen:  # a site's four-component groups, one 16-byte load each (half.py's layout)
            scale = f"{array}_norm[{index}] * {factor / half_max!r}f"
            head = f"{scale_into} = {scale};\n        {{ const float s_ = 1.0f;\n" if scale_into else \
                f"{{ const float s_ = {scale};\n"
            return (head +
                    f"          for (int g = 0; g < 3; g++) {{\n"
                    f"            const int4 w_ = ((GLOBAL const int4 *) {array})[g * VH + {index}];\n"
                    f"            psi[4 * g] = word_to_cfloat(w_.x, s_); psi[4 * g + 1] = word_to_cfloat(w_.y, s_);\n"
                    f"            psi[4 * g + 2] = word_to_cfloat(w_.z, s_); psi[4 * g + 3] = word_to_cfloat(w_.w, s_); }} }}")
        return f"for (int k = 0; k < 12; k++) psi[k] = {array}[k * VH + {index}];"

    project16 = context.get("project16", "none")
    if project16 not in ("none", "cvt", "bits"):
        raise ValueError(f"project16 {project16!r}: 'none', 'cvt' or 'bits'")
    projecting = project16 != "none"

    def project_in(array, index, factor, A, sigma):
        """Statements that set sn_ and h[6], the spin projection of the 16-bit input at
        ``index``, added in integers before any conversion: 12 conversions a hop, not 24
        (``project16`` "cvt": conversion instructions; "bits": the sum placed under the
        exponent of 1.5 * 2^23, exact for |sum| < 2^22, and one subtraction)."""
        def word(k):
            return f"w{k // 4}_.{'xyzw'[k % 4]}"

        def lo(w):
            return f"((int) (short) {w})"

        def hi(w):
            return f"({w} >> 16)"

        def to_float(v):
            if project16 == "bits":
                cast = "__int_as_float" if backend == "cuda" else "as_float"
                return f"({cast}(0x4B400000 + ({v})) - 12582912.0f)"
            return f"(float) ({v})"

        lines = [f"sn_ = {array}_norm[{index}] * {factor / half_max!r}f;",
                 f"        const int4 w0_ = ((GLOBAL const int4 *) {array})[{index}];",
                 f"        const int4 w1_ = ((GLOBAL const int4 *) {array})[VH + {index}];",
                 f"        const int4 w2_ = ((GLOBAL const int4 *) {array})[2 * VH + {index}];",
                 f"        {C} h[6];"]
        for s_ in range(2):
            j, coef = nonzero(A[s_])
            c = coef if sigma == 1 else neg(coef)
            for col in range(3):
                a, b = word(s_ * 3 + col), word((2 + j) * 3 + col)
                re, im = {"1": (f"{lo(a)} + {lo(b)}", f"{hi(a)} + {hi(b)}"),
                          "-1": (f"{lo(a)} - {lo(b)}", f"{hi(a)} - {hi(b)}"),
                          "i": (f"{lo(a)} - {hi(b)}", f"{hi(a)} + {lo(b)}"),
                          "-i": (f"{lo(a)} + {hi(b)}", f"{hi(a)} - {lo(b)}")}[c]
                lines.append(f"        h[{s_ * 3 + col}] = {C}_new({to_float(re)}, {to_float(im)});")
        return "\n".join(lines)

    def accumulate(acc, expr, factor=None):
        """acc + a hop's contribution times ``factor``: by default the neighbour's 16-bit scale
        (sn_) for 16-bit input, else 1."""
        factor = factor or ("sn_" if h_in else None)
        return f"{C}_scale_add({expr}, {factor}, {acc})" if factor else f"{C}_add({acc}, {expr})"

    def link_entry(expr, fold):  # 18 and 12 parameters: every entry has one scale
        return f"chalf_to_cfloat({expr}, {1.0 if fold else link_scales[0]!r}f)" if half else expr

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

    link_groups = context.get("link_groups", None) or (1,) * ncomp
    sites = context.get("sites", 1)
    split = context.get("dir_split", 1)
    stage = context.get("stage", False)
    if split not in (1, 2, 4) or wgs % split or sites < 1:
        raise ValueError(f"dir_split {split} must be 1, 2 or 4 and divide wgs {wgs}; sites {sites} >= 1")
    if dist is not None and (sites, stage) != (1, False):
        raise ValueError("a distributed block's kernels take one site a work-group slot, "
                         "nothing staged (sites=1, stage=False)")
    plain = (sites, split, stage) == (1, 1, False)
    nrhs = context.get("nrhs", 1)
    if not isinstance(nrhs, int) or nrhs < 1:
        raise ValueError(f"nrhs {nrhs!r}: right-hand sides a launch takes, an int >= 1")
    if nrhs > 1 and (dist is not None or split > 1 or stage):
        raise ValueError("several right-hand sides a launch (nrhs > 1) take dir_split 1, nothing "
                         "staged, and no distributed block")

    def rhs(name, r):
        """Right-hand side r's name for a spinor or sum (the first keeps the one-field name)."""
        return name if r == 0 else f"{name}{r}"
    SPG = wgs // split  # sites a work-group takes per round
    NS = SPG + 2  # staged neighbour sites: the block's and one on each side

    def entry8(k, value):  # a 16-bit 8-parameter form's parameter k, as reconstruct8 takes it
        return f"{value} * {link_scales[k]!r}f"

    def link_loads(dest, mu, parity, site, fold):
        """Statements loading a link's stored parameters into ``dest`` (complex entries for
        18 and 12, the reals of the 8-parameter form), a group of link_groups per load:
        dslash.link_groups' layout. ``fold``: 16-bit entries left unscaled (their scale is
        folded into the neighbour spinor's)."""
        lines, first = [], 0
        base = (mu * 2 + parity) * ncomp
        for w in link_groups:
            block = f"gauge + {(base + first)}u * VH"
            if w == 1:
                k = first
                value = f"gauge[({base + k}u) * VH + {site}]"
                if reconstruct == 8:
                    value = entry8(k, value) if half else value
                else:
                    value = link_entry(value, fold)
                lines.append(f"        {dest}[{k}] = {value};")
            elif half and reconstruct == 8:  # w shorts: w / 2 words, two parameters each
                words = w // 2
                lines.append(f"        {{ const int{words} v_ = ((GLOBAL const int{words} *) ({block}))[{site}];")
                for i, lane in enumerate("xyzw"[:words]):
                    k = first + 2 * i
                    lines.append(f"          {{ const cfloat c_ = word_to_cfloat(v_.{lane}, 1.0f); "
                                 f"{dest}[{k}] = {entry8(k, 'c_.x')}; {dest}[{k + 1}] = {entry8(k + 1, 'c_.y')}; }}")
                lines.append("        }")
            elif half:  # w chalf: one word each
                lines.append(f"        {{ const int{w} v_ = ((GLOBAL const int{w} *) ({block}))[{site}];")
                for i, lane in enumerate("xyzw"[:w]):
                    scale = 1.0 if fold else link_scales[first + i]
                    lines.append(f"          {dest}[{first + i}] = word_to_cfloat(v_.{lane}, {scale!r}f);")
                lines.append("        }")
            elif reconstruct != 8:  # two complex entries, one 16-byte load (single precision)
                if w != 2 or real != "float":
                    raise ValueError(f"complex link groups of {w} in {real}: only 2 in float")
                lines.append(f"        {{ const float4 v_ = ((GLOBAL const float4 *) ({block}))[{site}];")
                lines.append(f"          {dest}[{first}] = {C}_new(v_.x, v_.y); "
                             f"{dest}[{first + 1}] = {C}_new(v_.z, v_.w); }}")
            else:  # w reals of the 8-parameter form
                lines.append(f"        {{ const {real}{w} v_ = ((GLOBAL const {real}{w} *) ({block}))[{site}];")
                lines.append("          " + " ".join(f"{dest}[{first + i}] = v_.{lane};"
                                                     for i, lane in enumerate("xyzw"[:w])))
                lines.append("        }")
            first += w
        return "\n".join(lines)

    def face_index(mu):
        """The face index of the site's other three coordinates (partition.py's order)."""
        names = [v for nu, v in enumerate("xyzt") if nu != mu]
        ext = [n for nu, n in enumerate(dims) if nu != mu]
        return f"((({names[2]} * {ext[1]}u + {names[1]}) * {ext[0]}u + {names[0]}) >> 1)"
%>
#define VH ${VH}u
% if context.get("carveout", -1) != -1:
/* L1/shared carve-out ${int(carveout)}% shared */
% endif
<%include file="complex_fma.mako"/>
% if half:
<%include file="half.mako"/>
% endif

<%def name="load_link(dest, mu, parity, site, fold=False)">\
    /* ${dest} = U_${mu} at parity ${parity}, checkerboard site ${site} (reconstruct ${reconstruct}${", in units of its 16-bit scale" if fold else ""}) */
% if reconstruct == 8:
    {
        ${real} p[8];
${link_loads("p", mu, parity, site, False)}
        swap_ = reconstruct8(p, ${dest});
    }
% else:
${link_loads(dest, mu, parity, site, fold)}
    % if reconstruct == 12:
    third_row(${dest});
    % if fold:
    for (int k = 6; k < 9; k++)  /* row 2 came out in the square of the entries' unit */
        ${dest}[k] = ${C}_scale(${dest}[k], ${repr(link_scales[0])}f);
    % endif
    % endif
% endif
</%def>

<%def name="load_ghost_link(dest, offset, fh, index)">\
    /* ${dest} = a backward neighbour's link, from the ghost links (reconstruct ${reconstruct},
       in the arithmetic's precision: never 16-bit) */
% if reconstruct == 8:
    {
        ${real} p[8];
    % for k in range(8):
        p[${k}] = gauge_ghost[${offset + k * fh}u + ${index}];
    % endfor
        swap_ = reconstruct8(p, ${dest});
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

<%def name="exchange(v, negate=True)">\
        /* colours 0 and 1 of both spins of ${v} exchanged${" and colour 2 negated" if negate else ""} where swap_ */
% for s in range(2):
        { const ${C} e0 = ${v}[${3 * s}], e1 = ${v}[${3 * s + 1}];
          ${v}[${3 * s}] = swap_ ? e1 : e0; ${v}[${3 * s + 1}] = swap_ ? e0 : e1; }
% if negate:
        ${v}[${3 * s + 2}] = ${C}_scale(${v}[${3 * s + 2}], swap_ ? -1 : 1);
% endif
% endfor
</%def>

/* row 2 = conj(row 0 x row 1): the links are in SU(3) */
DEVICE_FN void third_row(${C} *u)
{
    u[6] = ${C}_conj(${C}_mul_add(u[1], u[5], ${C}_mul(${neg_c("u[2]")}, u[4])));
    u[7] = ${C}_conj(${C}_mul_add(u[2], u[3], ${C}_mul(${neg_c("u[0]")}, u[5])));
    u[8] = ${C}_conj(${C}_mul_add(u[0], u[4], ${C}_mul(${neg_c("u[1]")}, u[3])));
}

% if reconstruct == 8:
/* The 8-parameter form of operations.lqcd.gauge.pack, rebuilt in registers as gauge._unpack8
   does: V_00 (a1), one more entry of row 0 and of column 0 as stored, the other's modulus
   from its row's or column's norm and its phase from a quarter-angle tangent t
   (exp(i theta) = z^2 / w, z = 1 - t^2 + 2 i t, w = (1 + t^2)^2); then rows 1 and 2 from
   conj(V) = adj(V)^T and orthogonality, divided by n = 1 - |a1|^2 >= 1/2. Two reciprocal
   square roots, no division, no branch.
   Returns whether the packing exchanged columns 0 and 1 and negated column 2: u is then V,
   and the hop exchanges and negates h's colours (U h = V (h1, h0, -h2)) or chi's rows
   (U^dagger h = P V^dagger h), fewer selects than undoing it in the 9 entries. */
DEVICE_FN bool reconstruct8(const ${real} *p, ${C} *u)
{
    const int j0 = (int) rint(p[4] * (${real}) ${repr(1 / choice_step)} + (${real}) ${repr(choice_centres[0])});
    const int j1 = (int) rint(p[7] * (${real}) ${repr(1 / choice_step)} + (${real}) ${repr(choice_centres[1])});
    const ${real} t0 = p[4] - (${real}) ${repr(choice_step)} * ((${real}) j0 - (${real}) ${repr(choice_centres[0])});
    const ${real} t1 = p[7] - (${real}) ${repr(choice_step)} * ((${real}) j1 - (${real}) ${repr(choice_centres[1])});
    const ${C} a1 = ${C}_new(p[0], p[1]);
    const ${C} kept0 = ${C}_new(p[2], p[3]);
    const ${C} kept1 = ${C}_new(p[5], p[6]);
    const ${real} n = 1 - ${C}_abs2(a1);
    const ${real} x0 = n - ${C}_abs2(kept0), x1 = n - ${C}_abs2(kept1);  /* >= 1/4 */
    const ${real} s0 = t0 * t0, s1 = t1 * t1;
    const ${real} w0 = (1 + s0) * (1 + s0), w1 = (1 + s1) * (1 + s1);
    /* q = (x0 w0^2 n^2)^(-1/2) gives both sqrt(x0) / w0 = x0 q n and 1 / n = q^2 x0 w0^2 n */
    const ${real} q = ${RSQRT}(x0 * w0 * w0 * n * n);
    const ${real} f0 = x0 * q * n;
    const ${real} inv_n = q * q * x0 * w0 * w0 * n;
    const ${real} f1 = x1 * ${RSQRT}(x1 * w1 * w1);
    const ${C} z0 = ${C}_new(1 - s0, 2 * t0), z1 = ${C}_new(1 - s1, 2 * t1);
    const ${C} rebuilt0 = ${C}_scale(${C}_mul(z0, z0), f0);
    const ${C} rebuilt1 = ${C}_scale(${C}_mul(z1, z1), f1);
    const bool row = (j0 & 2) != 0, col = j1 != 0;
    const ${C} a2 = row ? rebuilt0 : kept0, a3 = row ? kept0 : rebuilt0;
    const ${C} b1 = col ? rebuilt1 : kept1, c1 = col ? kept1 : rebuilt1;
    const ${C} b1n = ${C}_scale(b1, inv_n), c1n = ${C}_scale(c1, inv_n);
    const ${C} ab = ${C}_conj_mul(a1, b1n), ac = ${C}_conj_mul(a1, c1n);
    /* b2 = -(conj(a3 c1n) + a2 ab), b3 = conj(a2 c1n) - a3 ab, c2 = conj(a3 b1n) - a2 ac,
       c3 = -(conj(a2 b1n) + a3 ac), each as one product and a multiply-add */
    const ${C} a3c = ${C}_mul(a3, c1n), a2c = ${C}_mul(a2, c1n);
    const ${C} a3b = ${C}_mul(a3, b1n), a2b = ${C}_mul(a2, b1n);
    const ${C} b2 = ${C}_mul_add(${neg_c("a2")}, ab, ${C}_new(-a3c.x, a3c.y));
    const ${C} b3 = ${C}_mul_add(${neg_c("a3")}, ab, ${C}_conj(a2c));
    const ${C} c2 = ${C}_mul_add(${neg_c("a2")}, ac, ${C}_conj(a3b));
    const ${C} c3 = ${C}_mul_add(${neg_c("a3")}, ac, ${C}_new(-a2b.x, a2b.y));
    u[0] = a1; u[1] = a2; u[2] = a3;
    u[3] = b1; u[4] = b2; u[5] = b3;
    u[6] = c1; u[7] = c2; u[8] = c3;
    return (j0 & 1) != 0;
}
% endif

% for variant in variants:
<%
    parity, dagger, xpay = variant[:3]
    h_out, h_in, h_x = storage_of(variant)
    fold = half and reconstruct != 8 and h_in  # the links' 16-bit scale into the neighbour's
    suffix = f"_{variant[3] if len(variant) > 3 else 'hhh'}" if half else ""
    # psi: the neighbours' spinors, unless every hop projects its 16-bit words (project16),
    # and x_in of a half precision xpay
    need_psi = not (projecting and h_in and dist is None and not stage) or (half and xpay)
%>
% if dist is None:
KERNEL ${bounds} void dslash_p${parity}${"_dag" if dagger else ""}${"_xpay" if xpay else ""}${suffix}${f"_rhs{nrhs}" if nrhs > 1 else ""}(
    ${", ".join(spinor_params(rhs("out", r), False, h_out) for r in range(nrhs))}, ${", ".join(spinor_params(rhs("in", r), True, h_in) for r in range(nrhs))},
    GLOBAL const ${G} * RESTRICT gauge,
    ${", ".join(spinor_params(rhs("x_in", r), True, h_x) for r in range(nrhs))}, ${real} a)
{
% else:
<%include file="${dist['regions']}" args="part='head', parity=parity, dagger=dagger, xpay=xpay, bounds=bounds, G=G, GG=GG, suffix=suffix, spinors=(spinor_params('out', False, h_out), spinor_params('in', True, h_in), spinor_params('x_in', True, h_x))"/>\
% endif
% if plain and dist is None:
    const unsigned int cb = get_global_id(0);
    if (cb >= VH)
        return;
% elif not plain:
% if stage and h_in:
    LOCAL_DECL int4 stagew_[${3 * NS}];  /* the block's x neighbours: 16-bit words and norms */
    LOCAL_DECL float stagen_[${NS}];
% elif stage:
    LOCAL_DECL ${C} stage_[${12 * NS}];  /* the block's x neighbours, component-major */
% endif
% if split > 1:
    LOCAL_DECL ${C} part_acc_[${(split - 1) * 12 * SPG}];  /* the other directions' sums */
    const unsigned int part_ = get_local_id(0) / ${SPG}u;  /* which directions: warp-uniform */
    const unsigned int slot_ = get_local_id(0) - part_ * ${SPG}u;
% else:
    const unsigned int slot_ = get_local_id(0);
% endif
% if dist is None:
    for (unsigned int round_ = 0; round_ < ${sites}u; round_++)
    {
    /* this round's block: consecutive sites, coalesced; the next round's is the grid further */
    const unsigned int c0_ = (get_group_id(0) + round_ * get_num_groups(0)) * ${SPG}u;
    const unsigned int cb = c0_ + slot_;
% else:
    {   /* one round: the site cb the head chose (past VH: none) */
% endif
% if stage:
    /* staged: the other parity's sites lo_ to lo_ + ${NS - 1}, which hold every x neighbour
       of the block's sites but those across the x edge (unsigned: lo_ wraps below site 0) */
    const unsigned int lo_ = c0_ - 1u;
% if h_in:
    for (unsigned int e_ = get_local_id(0); e_ < ${3 * NS}u; e_ += ${wgs}u)
    {
        const unsigned int g_ = e_ / ${NS}u, src_ = lo_ + (e_ - g_ * ${NS}u);
        if (src_ < VH)
            stagew_[e_] = ((GLOBAL const int4 *) in)[g_ * VH + src_];
    }
    for (unsigned int e_ = get_local_id(0); e_ < ${NS}u; e_ += ${wgs}u)
        if (lo_ + e_ < VH)
            stagen_[e_] = in_norm[lo_ + e_];
% else:
    for (unsigned int e_ = get_local_id(0); e_ < ${12 * NS}u; e_ += ${wgs}u)
    {
        const unsigned int k_ = e_ / ${NS}u, src_ = lo_ + (e_ - k_ * ${NS}u);
        if (src_ < VH)
            stage_[e_] = in[k_ * VH + src_];
    }
% endif
    BARRIER();
% endif
% for r in range(nrhs):
    ${C} ${rhs("acc", r)}[12];
    for (int k = 0; k < 12; k++)
        ${rhs("acc", r)}[k] = ${C}_new(0, 0);
% endfor
    ${C} u[9];
% if need_psi:
    ${C} psi[12];
% endif
    if (cb < VH)
    {
% endif
    unsigned int r = cb / ${X // 2}u;
    const unsigned int xh = cb - r * ${X // 2}u;
    const unsigned int y = r % ${Y}u;
    r /= ${Y}u;
    const unsigned int z = r % ${Z}u;
    const unsigned int t = r / ${Z}u;
    const unsigned int x = 2 * xh + ((${parity}u + y + z + t) & 1u);
% if dist is not None:
<%include file="${dist['regions']}" args="part='skip'"/>\
% endif
% if plain:
% for r in range(nrhs):
    ${C} ${rhs("acc", r)}[12];
    for (int k = 0; k < 12; k++)
        ${rhs("acc", r)}[k] = ${C}_new(0, 0);
% endfor
    ${C} u[9];
% if need_psi:
    ${C} psi[12];
% endif
% endif
% for mu in range(4):
<%
    coord = "xyzt"[mu]
    extent = dims[mu]
%>
% if split > 1 and mu % (4 // split) == 0:
    if (part_ == ${mu * split // 4}u)
    {
% endif
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
% if h_in:
        float sn_;  /* the neighbour's 16-bit scale: applied as chi is accumulated, not per psi entry */
% endif
% if reconstruct == 8:
        bool swap_;  /* reconstruct8's column exchange, undone on h or chi */
% endif
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
<%
    g_at, g_fh = dist["ghost_offsets"][mu, direction], dist["face_sites"][mu]
%>\
% if h_in:
            {   /* a 16-bit face: its words, then its norms; the link above is in real units */
                GLOBAL const int4 *gw_ = (GLOBAL const int4 *) (ghost + ${g_at}u);
                sn_ = ((GLOBAL const float *) (ghost + ${g_at + 6 * g_fh}u))[f] * ${repr(1.0 / half_max)}f;
                for (int g = 0; g < 3; g++) {
                    const int4 w_ = gw_[g * ${g_fh}u + f];
                    psi[4 * g] = word_to_cfloat(w_.x, 1.0f); psi[4 * g + 1] = word_to_cfloat(w_.y, 1.0f);
                    psi[4 * g + 2] = word_to_cfloat(w_.z, 1.0f); psi[4 * g + 3] = word_to_cfloat(w_.w, 1.0f); }
            }
% else:
            for (int k = 0; k < 12; k++)
                psi[k] = ghost[${g_at}u + k * ${g_fh}u + f];
% endif
        }
        else
        {
% endif
        const unsigned int nb = ((((${c["t"]}) * ${Z}u + ${c["z"]}) * ${Y}u + ${c["y"]}) * ${X}u + ${c["x"]}) >> 1;
% if direction == 1:
${load_link("u", mu, parity, "cb", fold)}
% else:
${load_link("u", mu, 1 - parity, "nb", fold)}
% endif
<% projected = projecting and h_in and dist is None and not (stage and mu == 0) %>\
% for ri in range(nrhs):
% if nrhs > 1:
        {   /* right-hand side ${ri}: the link above, its own neighbour */
% endif
% if projected:
        ${project_in(rhs("in", ri), "nb", link_scales[0] if fold else 1.0, A, sigma)}
% elif stage and mu == 0:
        const unsigned int j_ = nb - lo_;
        if (j_ < ${NS}u)
        {
        ${spinor_in(rhs("in", ri), "j_", h_in, link_scales[0] if fold else 1.0, "sn_" if h_in else None, staged=True)}
        }
        else
        {
        ${spinor_in(rhs("in", ri), "nb", h_in, link_scales[0] if fold else 1.0, "sn_" if h_in else None)}
        }
% else:
        ${spinor_in(rhs("in", ri), "nb", h_in, link_scales[0] if fold else 1.0, "sn_" if h_in else None)}
% endif
% if ghosted:
        }
% endif
% if not projected:
        ${C} h[6];
% for s in range(2):
<% j, coef = nonzero(A[s]) %>\
    % for col in range(3):
        { const ${C} v = psi[${(2 + j) * 3 + col}]; h[${s * 3 + col}] = ${C}_add(psi[${s * 3 + col}], ${times(coef if sigma == 1 else neg(coef), "v")}); }
    % endfor
% endfor
% endif
% if mu == 3 and t_boundary == -1 and (dist is None or dist["t_signs"][0 if direction == 1 else 1] == -1):
% if h_in:
        if (t == ${T - 1 if direction == 1 else 0}u)
            sn_ = -sn_;
% else:
        if (t == ${T - 1 if direction == 1 else 0}u)
            for (int k = 0; k < 6; k++)
                h[k] = ${C}_scale(h[k], -1);
% endif
% endif
% if reconstruct == 8 and direction == 1:
${exchange("h")}
% endif
        ${C} chi[6];
% for s in range(2):
    % for row in range(3):
    % if direction == 1:
        chi[${s * 3 + row}] = ${C}_mul_add(u[${row * 3 + 2}], h[${s * 3 + 2}], ${C}_mul_add(u[${row * 3 + 1}], h[${s * 3 + 1}], ${C}_mul(u[${row * 3}], h[${s * 3}])));
    % else:
        chi[${s * 3 + row}] = ${C}_conj_mul_add(u[${6 + row}], h[${s * 3 + 2}], ${C}_conj_mul_add(u[${3 + row}], h[${s * 3 + 1}], ${C}_conj_mul(u[${row}], h[${s * 3}])));
    % endif
    % endfor
% endfor
% if reconstruct == 8 and direction == -1:
${exchange("chi", False)}
        /* chi's row 2 negated where swap_, as it is accumulated */
        const ${"float" if h_in else real} row2_ = swap_ ? -${"sn_" if h_in else "1"} : ${"sn_" if h_in else "1"};
% endif
% for s in range(2):
<%
    # lower half += sigma * (A^dagger chi): row s of A^dagger is the conjugate of column s of A
    [(j, coef)] = [(jj, conj(A[jj][s])) for jj in range(2) if A[jj][s] != "0"]
    coef = coef if sigma == 1 else neg(coef)
%>\
    % for col in range(3):
<% factor = "row2_" if reconstruct == 8 and direction == -1 and col == 2 else None %>\
<% acc_ = rhs("acc", ri) %>\
        ${acc_}[${s * 3 + col}] = ${accumulate(f"{acc_}[{s * 3 + col}]", f"chi[{s * 3 + col}]", factor)};
        { const ${C} v = chi[${j * 3 + col}]; ${acc_}[${(2 + s) * 3 + col}] = ${accumulate(f"{acc_}[{(2 + s) * 3 + col}]", times(coef, "v"), factor)}; }
    % endfor
% endfor
% if nrhs > 1:
        }
% endif
% endfor
    }
% endfor
% if split > 1 and mu % (4 // split) == 4 // split - 1:
    }
% endif
% endfor
% if not plain:
    }
% if split > 1:
    /* the other directions' sums to the first part's work-items */
    if (part_ > 0)
        for (int k = 0; k < 12; k++)
            part_acc_[((part_ - 1u) * 12u + k) * ${SPG}u + slot_] = acc[k];
    BARRIER();
    if (part_ == 0)
        for (int p_ = 0; p_ < ${split - 1}; p_++)
            for (int k = 0; k < 12; k++)
                acc[k] = ${C}_add(acc[k], part_acc_[(p_ * 12 + k) * ${SPG}u + slot_]);
% endif
    if (cb < VH${" && part_ == 0" if split > 1 else ""})
    {
% endif
% for ri in range(nrhs):
<% acc_, out_, x_ = rhs("acc", ri), rhs("out", ri), rhs("x_in", ri) %>\
% if nrhs > 1:
    {   /* right-hand side ${ri} */
% endif
% if half and xpay:
    ${spinor_in(x_, "cb", h_x)}
    for (int k = 0; k < 12; k++)
        ${acc_}[k] = ${C}_add(psi[k], ${C}_scale(${acc_}[k], a));
% endif
% if h_out:
    /* the site's norm is its largest |component|: every stored one fits 16 bits */
    float m_ = 0;
    for (int k = 0; k < 12; k++)
        m_ = fmax(m_, fmax(fabs(${acc_}[k].x), fabs(${acc_}[k].y)));
    ${out_}_norm[cb] = m_;
    const float inv_ = m_ > 0 ? ${repr(float(half_max))}f / m_ : 0.0f;
    for (int g = 0; g < 3; g++)
        ((GLOBAL int4 *) ${out_})[g * VH + cb] = int4_new(
            cfloat_to_word(${acc_}[4 * g], inv_), cfloat_to_word(${acc_}[4 * g + 1], inv_),
            cfloat_to_word(${acc_}[4 * g + 2], inv_), cfloat_to_word(${acc_}[4 * g + 3], inv_));
% else:
    for (int k = 0; k < 12; k++)
    {
% if xpay and not half:
        ${out_}[k * VH + cb] = ${C}_add(${x_}[k * VH + cb], ${C}_scale(${acc_}[k], a));
% else:
        ${out_}[k * VH + cb] = ${acc_}[k];
% endif
    }
% endif
% if nrhs > 1:
    }
% endif
% endfor
% if not plain:
    }
% if sites > 1 and (split > 1 or stage):
    BARRIER();  /* every work-item is done with the local buffers before the next round */
% endif
    }
% endif
}

% endfor
