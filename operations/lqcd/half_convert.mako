## Spinor fields of one parity between half precision (operations/lqcd/half.py: values in
## groups of four components per site, (3, n, 4) chalf) and single or double precision, one
## site per work-item (a site's norm needs all its 12 components).
## Variables: cplx ("cfloat" or "cdouble"), wgs, half_max (the largest stored magnitude).
<%include file="half.mako"/>
% if backend == "cuda":
typedef unsigned long long u64;
% else:
typedef ulong u64;
% endif
<% real = "float" if cplx == "cfloat" else "double" %>

/* values, norms = half(in): the site's norm is its largest |part| */
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void to_half(GLOBAL chalf * RESTRICT values,
                                                       GLOBAL float * RESTRICT norms,
                                                       GLOBAL const ${cplx} * RESTRICT in, u64 n)
{
    for (u64 i = get_global_id(0); i < n; i += get_global_size(0))
    {
        ${cplx} v[12];
        ${real} m = 0;
        for (int k = 0; k < 12; k++)
        {
            v[k] = in[k * n + i];
            m = fmax(m, fmax(fabs(v[k].x), fabs(v[k].y)));
        }
        const float norm = (float) m;
        norms[i] = norm;
        /* scaled by the stored (float) norm, as readers will scale back */
        const ${real} inv = norm > 0 ? (${real}) ${half_max} / (${real}) norm : (${real}) 0;
        for (int k = 0; k < 12; k++)
            values[((k >> 2) * n + i) * 4 + (k & 3)] = chalf_new((short) rint(fmin(fmax(v[k].x * inv, (${real}) -${half_max}), (${real}) ${half_max})),
                                          (short) rint(fmin(fmax(v[k].y * inv, (${real}) -${half_max}), (${real}) ${half_max})));
    }
}

/* out = the value half storage holds */
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void from_half(GLOBAL ${cplx} * RESTRICT out,
                                                         GLOBAL const chalf * RESTRICT values,
                                                         GLOBAL const float * RESTRICT norms, u64 n)
{
    for (u64 i = get_global_id(0); i < n; i += get_global_size(0))
    {
        const ${real} s = (${real}) norms[i] / (${real}) ${half_max};
        for (int k = 0; k < 12; k++)
        {
            const chalf h = values[((k >> 2) * n + i) * 4 + (k & 3)];
            out[k * n + i] = ${cplx}_new(h.x * s, h.y * s);
        }
    }
}
