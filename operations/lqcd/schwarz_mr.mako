## One minimal-residual step per Schwarz block, on even-site vectors (12, V/2) of one parity:
## block_dots:   partial sums of (<A r, r>_b re, im, |A r|^2_b) over the sites of block b
##               (`splits` work-groups per block, each a share of its sites, in double)
## block_finish: d[b] = the sum of block b's partial sums (one work-group per block)
## block_update: z += alpha_b r;  r -= alpha_b A r  with alpha_b = <A r, r>_b / |A r|^2_b read
##               from d on the device (0 where |A r|^2_b = 0: that block is solved), so the host
##               never waits between steps
## Variables (validated by operations/lqcd/schwarz.py):
##   cplx, real        "cfloat"/"float" or "cdouble"/"double"
##   dims              (X, Y, Z, T) of the lattice (all even)
##   block             (bx, by, bz, bt), each dividing the lattice's extent
##   parity            the parity of the vectors' sites
##   wgs               work-group size (a power of two)
##   splits            work-groups sharing one block's sums
##   half              (optional, default False) the vectors in half precision storage
##                     (operations/lqcd/half.py: 16-bit values in groups of four per site and a
##                     float norm per site, each argument followed by its norms); cplx "cfloat"
##   half_max          (with half) the largest stored magnitude
<%
    X, Y, Z, T = dims
    bx, by, bz, bt = block
    nx, ny, nz, nt = X // bx, Y // by, Z // bz, T // bt
    VH = X * Y * Z * T // 2
    VB = bx * by * bz * bt
    C = cplx
    half = context.get("half", False)
%>
#define VH ${VH}u
% if half:
<%include file="half.mako"/>
% endif

<%def name="vector(name, const=True)"><% q = "const " if const else "" %>\
% if context.get("half", False):
GLOBAL ${q}chalf * RESTRICT ${name}, GLOBAL ${q}float * RESTRICT ${name}_norm\
% else:
GLOBAL ${q}${cplx} * RESTRICT ${name}\
% endif
</%def>

## the site cb's 12 components of vector `name` into the array `dest`
<%def name="load(name, dest)">\
% if context.get("half", False):
    {
        const float s_ = ${name}_norm[cb] * ${repr(1.0 / half_max)}f;
        for (int g = 0; g < 3; g++)
        {
            const int4 w_ = ((GLOBAL const int4 *) ${name})[g * VH + cb];
            ${dest}[4 * g] = word_to_cfloat(w_.x, s_);
            ${dest}[4 * g + 1] = word_to_cfloat(w_.y, s_);
            ${dest}[4 * g + 2] = word_to_cfloat(w_.z, s_);
            ${dest}[4 * g + 3] = word_to_cfloat(w_.w, s_);
        }
    }
% else:
    for (int k = 0; k < 12; k++)
        ${dest}[k] = ${name}[k * VH + cb];
% endif
</%def>

## the array `src` as the site cb's 12 components of vector `name` (half: its norm the largest
## |part|, so that every stored part fits 16 bits)
<%def name="store(name, src)">\
% if context.get("half", False):
    {
        float m_ = 0;
        for (int k = 0; k < 12; k++)
            m_ = fmax(m_, fmax(fabs(${src}[k].x), fabs(${src}[k].y)));
        ${name}_norm[cb] = m_;
        const float inv_ = m_ > 0 ? ${repr(float(half_max))}f / m_ : 0.0f;
        for (int g = 0; g < 3; g++)
            ((GLOBAL int4 *) ${name})[g * VH + cb] = int4_new(
                cfloat_to_word(${src}[4 * g], inv_), cfloat_to_word(${src}[4 * g + 1], inv_),
                cfloat_to_word(${src}[4 * g + 2], inv_), cfloat_to_word(${src}[4 * g + 3], inv_));
    }
% else:
    for (int k = 0; k < 12; k++)
        ${name}[k * VH + cb] = ${src}[k];
% endif
</%def>

/* the block of even-odd site cb (of this parity) */
DEVICE_FN unsigned int block_of(unsigned int cb)
{
    unsigned int r = cb / ${X // 2}u;
    const unsigned int xh = cb - r * ${X // 2}u;
    const unsigned int y = r % ${Y}u;
    r /= ${Y}u;
    const unsigned int z = r % ${Z}u;
    const unsigned int t = r / ${Z}u;
    const unsigned int x = 2u * xh + ((${parity}u + y + z + t) & 1u);
    return (((t / ${bt}u) * ${nz}u + z / ${bz}u) * ${ny}u + y / ${by}u) * ${nx}u + x / ${bx}u;
}

<%def name="reduce_and_store(target)">\
    LOCAL_DECL double scratch[3][${wgs}];
    scratch[0][lid] = re;
    scratch[1][lid] = im;
    scratch[2][lid] = nn;
    BARRIER();
% for stride in [2 ** i for i in range(wgs.bit_length() - 2, -1, -1)]:
    if (lid < ${stride}u)
    {
        scratch[0][lid] += scratch[0][lid + ${stride}u];
        scratch[1][lid] += scratch[1][lid + ${stride}u];
        scratch[2][lid] += scratch[2][lid + ${stride}u];
    }
    BARRIER();
% endfor
    if (lid == 0)
    {
        ${target}[0] = scratch[0][0];
        ${target}[1] = scratch[1][0];
        ${target}[2] = scratch[2][0];
    }
</%def>

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void block_dots(
    ${vector("ar")}, ${vector("r")},
    GLOBAL double * RESTRICT partials)
{
    const unsigned int b = get_group_id(0) / ${splits}u;
    const unsigned int share = get_group_id(0) % ${splits}u;
    const unsigned int lid = get_local_id(0);
    const unsigned int bxi = b % ${nx}u, byi = (b / ${nx}u) % ${ny}u;
    const unsigned int bzi = (b / ${nx * ny}u) % ${nz}u, bti = b / ${nx * ny * nz}u;
    double re = 0, im = 0, nn = 0;
% if bx % 2 == 0:
    /* this group's share of the block's sites of this parity: half of each x-row of the block
       (its rows start at even x), so consecutive work-items read consecutive sites */
    for (unsigned int l = share * ${wgs}u + lid; l < ${VB // 2}u; l += ${wgs * splits}u)
    {
        const unsigned int xh = l % ${bx // 2}u;
        const unsigned int y = byi * ${by}u + (l / ${bx // 2}u) % ${by}u;
        const unsigned int z = bzi * ${bz}u + (l / ${bx // 2 * by}u) % ${bz}u;
        const unsigned int t = bti * ${bt}u + l / ${bx // 2 * by * bz}u;
        const unsigned int x = bxi * ${bx}u + 2u * xh + ((${parity}u + y + z + t) & 1u);
% else:
    /* this group's share of the block's sites, those of this parity counted */
    for (unsigned int l = share * ${wgs}u + lid; l < ${VB}u; l += ${wgs * splits}u)
    {
        const unsigned int x = bxi * ${bx}u + l % ${bx}u;
        const unsigned int y = byi * ${by}u + (l / ${bx}u) % ${by}u;
        const unsigned int z = bzi * ${bz}u + (l / ${bx * by}u) % ${bz}u;
        const unsigned int t = bti * ${bt}u + l / ${bx * by * bz}u;
        if (((x + y + z + t) & 1u) != ${parity}u)
            continue;
% endif
        const unsigned int cb = (((t * ${Z}u + z) * ${Y}u + y) * ${X}u + x) >> 1;
        ${C} a_[12], v_[12];
${load("ar", "a_")}
${load("r", "v_")}
        for (int k = 0; k < 12; k++)
        {
            const ${C} a = a_[k], v = v_[k];
            re += (double) a.x * v.x + (double) a.y * v.y;
            im += (double) a.x * v.y - (double) a.y * v.x;
            nn += (double) a.x * a.x + (double) a.y * a.y;
        }
    }
${reduce_and_store("(partials + 3 * get_group_id(0))")}
}

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void block_finish(
    GLOBAL const double * RESTRICT partials, GLOBAL double * RESTRICT d)
{
    const unsigned int b = get_group_id(0);
    const unsigned int lid = get_local_id(0);
    double re = 0, im = 0, nn = 0;
    for (unsigned int s = lid; s < ${splits}u; s += ${wgs}u)
    {
        re += partials[3 * (b * ${splits}u + s)];
        im += partials[3 * (b * ${splits}u + s) + 1];
        nn += partials[3 * (b * ${splits}u + s) + 2];
    }
${reduce_and_store("(d + 3 * b)")}
}

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void block_update(
    ${vector("r", False)}, ${vector("z", False)}, ${vector("ar")},
    GLOBAL const double * RESTRICT d)
{
    const unsigned int cb = get_global_id(0);
    if (cb >= VH)
        return;
    const unsigned int b = block_of(cb);
    const double nn = d[3 * b + 2];
    const ${C} alpha = nn > 0 ? ${C}_new((${real}) (d[3 * b] / nn), (${real}) (d[3 * b + 1] / nn))
                              : ${C}_new(0, 0);
% if half:
    ${C} r_[12], z_[12], a_[12];
${load("r", "r_")}
${load("z", "z_")}
${load("ar", "a_")}
    for (int k = 0; k < 12; k++)
    {
        z_[k] = ${C}_add(z_[k], ${C}_mul(alpha, r_[k]));
        r_[k] = ${C}_sub(r_[k], ${C}_mul(alpha, a_[k]));
    }
${store("z", "z_")}
${store("r", "r_")}
% else:
    for (int k = 0; k < 12; k++)
    {
        const ${C} v = r[k * VH + cb];
        z[k * VH + cb] = ${C}_add(z[k * VH + cb], ${C}_mul(alpha, v));
        r[k * VH + cb] = ${C}_sub(v, ${C}_mul(alpha, ar[k * VH + cb]));
    }
% endif
}
