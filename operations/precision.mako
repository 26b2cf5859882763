## Moving vectors between precisions for mixed-precision solvers.
## Variables: src, dst (element C types), wgs.
<%
    def cast(expr):
        if dst in ("cfloat", "cdouble"):
            real = "float" if dst == "cfloat" else "double"
            return f"{dst}_new(({real}) ({expr}).x, ({real}) ({expr}).y)"
        return f"({dst}) ({expr})"
%>
% if backend == "cuda":
typedef unsigned long long u64;
% else:
typedef ulong u64;
% endif

/* dst = (dst type) src */
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void convert(GLOBAL ${dst} * RESTRICT out,
                                                       GLOBAL const ${src} * RESTRICT in, u64 n)
{
    for (u64 i = get_global_id(0); i < n; i += get_global_size(0))
        out[i] = ${cast("in[i]")};
}

/* out += (out type) in */
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void add_converted(GLOBAL ${dst} * RESTRICT out,
                                                             GLOBAL const ${src} * RESTRICT in, u64 n)
{
    for (u64 i = get_global_id(0); i < n; i += get_global_size(0))
    {
        const ${dst} v = ${cast("in[i]")};
% if dst in ("cfloat", "cdouble"):
        out[i] = ${dst}_add(out[i], v);
% else:
        out[i] = out[i] + v;
% endif
    }
}
