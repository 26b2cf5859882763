## One pass over n elements of some vectors: update them with `body` and accumulate `reductions`.
## Variables (all validated by operations/fused.py before rendering):
##   real, elem        C types of the scalar and the element ("float"/"cfloat", "double"/"cdouble")
##   is_complex        whether elements are complex
##   acc, combine      accumulator type and how partial results combine ("sum", "min", "max")
##   vectors           names of the vector arguments; written: those the body assigns
##   scalars           (name, kind) pairs; kind "real" or "field" (the element type), or "ratio":
##                     a real computed on the device as num / den[at] (den: float64 device data,
##                     such as another pass's results, so the host need not wait for them)
##   body              C statements on the element variables (may be empty)
##   reductions        C expressions, one per accumulator component
##   wgs, ipt, vec     work-group size; chunks per work-item per step; elements per chunk (one
##                     vector load of vec elements, at most 16 bytes)
##   shuffle           warp-shuffle final stage of the work-group reduction (CUDA)
##   serial_group      (CPU devices) the work-group's reduction by work-item 0 alone, in order
##   single_pass       (CUDA, with reductions) the last work-group to finish combines every
##                     group's partial result (a ticket counter after a memory fence), so a
##                     reduction is one launch; otherwise a second kernel, fused_finish, does
<%
    k = len(reductions)
    identity = {"sum": "0", "min": "INFINITY", "max": "-INFINITY"}[combine]
    width = vec * (2 if is_complex else 1)          # reals per chunk
    raw = real if width == 1 else f"{real}{width}"  # the type of one chunk load
    comps = "xyzw"

    def element(v, e):
        if width == 1:
            return f"{v}_raw"
        if is_complex:
            return f"{elem}_new({v}_raw.{comps[2 * e]}, {v}_raw.{comps[2 * e + 1]})"
        return f"{v}_raw.{comps[e]}"

    def put(v, e):
        if width == 1:
            return f"{v}_out = {v};"
        if is_complex:
            return f"{v}_out.{comps[2 * e]} = {v}.x; {v}_out.{comps[2 * e + 1]} = {v}.y;"
        return f"{v}_out.{comps[e]} = {v};"
%>
% if backend == "cuda":
typedef unsigned long long u64;
% else:
typedef ulong u64;
% endif

% if is_complex:
#define MUL(a, b) ${elem}_mul(a, b)
#define ADD(a, b) ${elem}_add(a, b)
#define SUB(a, b) ${elem}_sub(a, b)
#define RSCALE(v, s) ${elem}_scale(v, s)
#define NORM2(v) ((${acc}) (v).x * (${acc}) (v).x + (${acc}) (v).y * (${acc}) (v).y)
/* <a, b> = conj(a) b, real and imaginary parts */
#define CDOT_RE(a, b) ((${acc}) (a).x * (${acc}) (b).x + (${acc}) (a).y * (${acc}) (b).y)
#define CDOT_IM(a, b) ((${acc}) (a).x * (${acc}) (b).y - (${acc}) (a).y * (${acc}) (b).x)
#define RE(v) ((${acc}) (v).x)
#define IM(v) ((${acc}) (v).y)
% else:
#define MUL(a, b) ((a) * (b))
#define ADD(a, b) ((a) + (b))
#define SUB(a, b) ((a) - (b))
#define RSCALE(v, s) ((v) * (s))
#define NORM2(v) ((${acc}) (v) * (${acc}) (v))
#define CDOT_RE(a, b) ((${acc}) (a) * (${acc}) (b))
#define RE(v) ((${acc}) (v))
% endif

% if combine == "sum":
#define COMBINE(a, b) ((a) + (b))
% elif combine == "min":
/* NaN wins, as in numpy. Arguments are evaluated more than once: pass plain variables. */
#define COMBINE(a, b) ((isnan(a) || (a) < (b)) ? (a) : (b))
% else:
#define COMBINE(a, b) ((isnan(a) || (a) > (b)) ? (a) : (b))
% endif

## The body on one element: declare the element variables, run the body, accumulate.
<%def name="process(source)">\
% for v in vectors:
                ${elem} ${v} = ${source(v)};
% endfor
                ${body}
% for c, expr in enumerate(reductions):
                { const ${acc} term = ${expr}; acc[${c}] = COMBINE(acc[${c}], term); }
% endfor
</%def>

<%def name="work_group_reduce(out)">
    /* Tree reduction of acc[] over the work-group into ${out}[] (valid in work-item 0). */
    % for c in range(k):
    scratch[${c}][lid] = acc[${c}];
    % endfor
    BARRIER();
% if serial_group:
    /* A CPU device runs a work-group's items in turn on one core: work-item 0 adds the others'
       entries in order. One barrier where the tree takes log2(wgs) more, each a region of the
       work-group loop that PoCL generates code for at the first launch. */
    if (lid == 0)
    {
    % for c in range(k):
        ${acc} v${c} = scratch[${c}][0];
        for (unsigned int i = 1; i < ${wgs}u; i++)
        {
            const ${acc} other = scratch[${c}][i];
            v${c} = COMBINE(v${c}, other);
        }
        ${out}[${c}] = v${c};
    % endfor
    }
% else:
<% stop = 64 if shuffle else 1 %>\
## With the shuffle stage the tree stops at 64 live entries; one warp folds them.
% for half in [h for h in (512, 256, 128, 64, 32, 16, 8, 4, 2, 1) if h < wgs and h >= stop]:
    if (lid < ${half})
    {
    % for c in range(k):
        {
            const ${acc} other = scratch[${c}][lid + ${half}];
            scratch[${c}][lid] = COMBINE(scratch[${c}][lid], other);
        }
    % endfor
    }
    BARRIER();
% endfor
% if shuffle:
    if (lid < 32)
    {
    % for c in range(k):
        ${acc} v${c} = scratch[${c}][lid];
        {
            const ${acc} other = scratch[${c}][lid + 32];
            v${c} = COMBINE(v${c}, other);
        }
        % for off in (16, 8, 4, 2, 1):
        {
            /* every lane shuffles: the value is taken before COMBINE branches */
            const ${acc} other = __shfl_down_sync(0xffffffffu, v${c}, ${off});
            v${c} = COMBINE(v${c}, other);
        }
        % endfor
        ${out}[${c}] = v${c};
    % endfor
    }
% else:
    % for c in range(k):
    ${out}[${c}] = scratch[${c}][0];
    % endfor
% endif
% endif
</%def>

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void fused_pass(
% for v in vectors:
    GLOBAL ${elem} * RESTRICT ${v}_ptr,
% endfor
% for name, kind in scalars:
    % if kind == "field" and is_complex:
    ${real} ${name}_re, ${real} ${name}_im,
    % elif kind == "ratio":
    double ${name}_num, GLOBAL const double * RESTRICT ${name}_den, unsigned int ${name}_at,
    % else:
    ${real} ${name},
    % endif
% endfor
    GLOBAL ${acc} * RESTRICT partials,
% if single_pass:
    unsigned int * RESTRICT tickets,
    ${acc} * RESTRICT out,
% endif
    u64 n)
{
    const unsigned int lid = get_local_id(0);
% for name, kind in scalars:
    % if kind == "field" and is_complex:
    const ${elem} ${name} = ${elem}_new(${name}_re, ${name}_im);
    % elif kind == "ratio":
    const ${real} ${name} = (${real}) (${name}_num / ${name}_den[${name}_at]);
    % endif
% endfor
% if k:
    LOCAL_DECL ${acc} scratch[${k}][${wgs}];
    ${acc} acc[${k}];
% endif
% if single_pass:
    LOCAL_DECL bool last_group;
% endif
% for c in range(k):
    acc[${c}] = ${identity};
% endfor
    const u64 chunks = n / ${vec};
    const u64 stride = (u64) get_num_groups(0) * ${wgs * ipt};
    for (u64 base = (u64) get_group_id(0) * ${wgs * ipt} + lid; base < chunks; base += stride)
    {
        /* Load every chunk first so that ${ipt} loads per vector are in flight at once. */
% for v in vectors:
        ${raw} ${v}_chunk[${ipt}];
% endfor
% for j in range(ipt):
        if (base + ${j * wgs} < chunks)
        {
    % for v in vectors:
            ${v}_chunk[${j}] = ((GLOBAL const ${raw} *) ${v}_ptr)[base + ${j * wgs}];
    % endfor
        }
% endfor
% for j in range(ipt):
        if (base + ${j * wgs} < chunks)
        {
    % for v in vectors:
            const ${raw} ${v}_raw = ${v}_chunk[${j}];
    % endfor
    % for v in written:
            ${raw} ${v}_out;
    % endfor
    % for e in range(vec):
            {
${process(lambda v, e=e: element(v, e))}
        % for v in written:
                ${put(v, e)}
        % endfor
            }
    % endfor
    % for v in written:
            ((GLOBAL ${raw} *) ${v}_ptr)[base + ${j * wgs}] = ${v}_out;
    % endfor
        }
% endfor
    }
% if vec > 1:
    /* The last n % ${vec} elements, one per work-item of the first group. */
    if (get_group_id(0) == 0 && lid < n - chunks * ${vec})
    {
        const u64 i = chunks * ${vec} + lid;
        {
${process(lambda v: f"{v}_ptr[i]")}
    % for v in written:
                ${v}_ptr[i] = ${v};
    % endfor
        }
    }
% endif
% if k:
    ${acc} group_result[${k}];
${work_group_reduce("group_result")}
    if (lid == 0)
    {
    % for c in range(k):
        partials[${c} * get_num_groups(0) + get_group_id(0)] = group_result[${c}];
    % endfor
    % if single_pass:
        __threadfence();  /* publish this group's partials before taking a ticket */
        last_group = atomicAdd(tickets, 1u) == get_num_groups(0) - 1;
    % endif
    }
    % if single_pass:
    BARRIER();
    if (last_group)
    {
        /* Every other group has published its partials: combine them without a second launch. */
        const volatile ${acc} *published = partials;
        const unsigned int groups = get_num_groups(0);
        % for c in range(k):
        acc[${c}] = ${identity};
        for (unsigned int g = lid; g < groups; g += ${wgs})
        {
            const ${acc} term = published[${c} * groups + g];
            acc[${c}] = COMBINE(acc[${c}], term);
        }
        % endfor
        ${acc} total[${k}];
${work_group_reduce("total")}
        if (lid == 0)
        {
        % for c in range(k):
            out[${c}] = total[${c}];
        % endfor
            *tickets = 0u;  /* ready for the next launch */
        }
    }
    % endif
% endif
}

% if k and not single_pass:
/* Second pass: one work-group combines the partial results of every group of the first. */
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void fused_finish(
    GLOBAL const ${acc} * RESTRICT partials, unsigned int groups, GLOBAL ${acc} * RESTRICT out)
{
    const unsigned int lid = get_local_id(0);
    LOCAL_DECL ${acc} scratch[${k}][${wgs}];
    ${acc} acc[${k}];
    % for c in range(k):
    acc[${c}] = ${identity};
    for (unsigned int g = lid; g < groups; g += ${wgs})
    {
        const ${acc} term = partials[${c} * groups + g];
        acc[${c}] = COMBINE(acc[${c}], term);
    }
    % endfor
    ${acc} group_result[${k}];
${work_group_reduce("group_result")}
    if (lid == 0)
    {
    % for c in range(k):
        out[${c}] = group_result[${c}];
    % endfor
    }
}
% endif
