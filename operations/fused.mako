## One pass over n elements of some vectors: update them with `body` and accumulate `reductions`.
## Variables (all validated by operations/fused.py before rendering):
##   real, elem        C types of the scalar and the element ("float"/"cfloat", "double"/"cdouble")
##   is_complex        whether elements are complex
##   acc, combine      accumulator type and how partial results combine ("sum", "min", "max")
##   vectors           names of the vector arguments; written: those the body assigns;
##                     write_only: written and never read, so never loaded
##   scalars           (name, kind) pairs; kind "real" or "field" (the element type)
##   body              C statements on the element variables (may be empty)
##   reductions        C expressions, one per accumulator component
##   wgs, ipt, shuffle work-group size, items per work-item, warp-shuffle final stage (CUDA)
<%
    k = len(reductions)
    identity = {"sum": "0", "min": "INFINITY", "max": "-INFINITY"}[combine]
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
/* NaN wins, as in numpy */
#define COMBINE(a, b) ((isnan(a) || (a) < (b)) ? (a) : (b))
% else:
#define COMBINE(a, b) ((isnan(a) || (a) > (b)) ? (a) : (b))
% endif

<%def name="work_group_reduce(out)">
    /* Tree reduction of acc[] over the work-group into ${out}[] (valid in work-item 0). */
    % for c in range(k):
    scratch[${c}][lid] = acc[${c}];
    % endfor
    BARRIER();
<% stop = 64 if shuffle else 1 %>\
## With the shuffle stage the tree stops at 64 live entries; one warp folds them.
% for half in [h for h in (512, 256, 128, 64, 32, 16, 8, 4, 2, 1) if h < wgs and h >= stop]:
    if (lid < ${half})
    {
    % for c in range(k):
        scratch[${c}][lid] = COMBINE(scratch[${c}][lid], scratch[${c}][lid + ${half}]);
    % endfor
    }
    BARRIER();
% endfor
% if shuffle and wgs >= 64:
    if (lid < 32)
    {
    % for c in range(k):
        ${acc} v${c} = COMBINE(scratch[${c}][lid], scratch[${c}][lid + 32]);
        % for off in (16, 8, 4, 2, 1):
        v${c} = COMBINE(v${c}, __shfl_down_sync(0xffffffffu, v${c}, ${off}));
        % endfor
        ${out}[${c}] = v${c};
    % endfor
    }
% else:
    % for c in range(k):
    ${out}[${c}] = scratch[${c}][0];
    % endfor
% endif
</%def>

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void fused_pass(
% for v in vectors:
    GLOBAL ${elem} * RESTRICT ${v}_ptr,
% endfor
% for name, kind in scalars:
    % if kind == "field" and is_complex:
    ${real} ${name}_re, ${real} ${name}_im,
    % else:
    ${real} ${name},
    % endif
% endfor
    GLOBAL ${acc} * RESTRICT partials,
    u64 n)
{
    const unsigned int lid = get_local_id(0);
% for name, kind in scalars:
    % if kind == "field" and is_complex:
    const ${elem} ${name} = ${elem}_new(${name}_re, ${name}_im);
    % endif
% endfor
% if k:
    LOCAL_DECL ${acc} scratch[${k}][${wgs}];
    ${acc} acc[${k}];
    % for c in range(k):
    acc[${c}] = ${identity};
    % endfor
% endif
    const u64 stride = (u64) get_num_groups(0) * ${wgs * ipt};
    for (u64 base = (u64) get_group_id(0) * ${wgs * ipt} + lid; base < n; base += stride)
    {
        /* Load every item first so that ${ipt} loads per vector are in flight at once. */
% for v in vectors:
    % if v not in write_only:
        ${elem} ${v}_v[${ipt}];
    % endif
% endfor
% for j in range(ipt):
        if (base + ${j * wgs} < n)
        {
    % for v in vectors:
        % if v not in write_only:
            ${v}_v[${j}] = ${v}_ptr[base + ${j * wgs}];
        % endif
    % endfor
        }
% endfor
% for j in range(ipt):
        if (base + ${j * wgs} < n)
        {
    % for v in vectors:
        % if v in write_only:
            ${elem} ${v};
        % else:
            ${elem} ${v} = ${v}_v[${j}];
        % endif
    % endfor
            ${body}
    % for v in written:
            ${v}_ptr[base + ${j * wgs}] = ${v};
    % endfor
    % for c, expr in enumerate(reductions):
            acc[${c}] = COMBINE(acc[${c}], ${expr});
    % endfor
        }
% endfor
    }
% if k:
    ${acc} group_result[${k}];
${work_group_reduce("group_result")}
    if (lid == 0)
    {
    % for c in range(k):
        partials[${c} * get_num_groups(0) + get_group_id(0)] = group_result[${c}];
    % endfor
    }
% endif
}

% if k:
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
        acc[${c}] = COMBINE(acc[${c}], partials[${c} * groups + g]);
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
