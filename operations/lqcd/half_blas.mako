## BLAS-1 and reductions on half precision spinor fields of one parity (operations/lqcd/half.py:
## values in groups of four chalf per site, (3, n, 4), one float norm per site), one site per
## work-item (a site's new norm needs all its 12 components), arithmetic in float, sums in double.
## Variables: wgs, half_max (the largest stored magnitude).
## Kernels (prefixed half_: dot is an OpenCL built-in; n sites; a, b complex as two floats; partial sums: one double (or two) per work-group):
##   axpy(y, x, a)          y = a x + y
##   xpay(y, x, b)          y = x + b y
##   axpy_norm(y, x, a, s)  y = a x + y, s[group] = its part of |y|^2 (of the stored y)
##   norm2(x, s)            s[group] = its part of |x|^2
##   dot(x, y, s)           s[2 group], s[2 group + 1] = its part of <x, y> = sum conj(x) y
<%include file="half.mako"/>
% if backend == "cuda":
typedef unsigned long long u64;
% else:
typedef ulong u64;
% endif


<%def name="load(name, dest)">\
        {   /* ${dest} = the 12 components ${name} holds at site i */
            const float s_ = ${name}_norm[i] * ${repr(1.0 / half_max)}f;
            for (int g = 0; g < 3; g++)
            {
                const int4 w_ = ((GLOBAL const int4 *) ${name})[g * n + i];
                ${dest}[4 * g] = word_to_cfloat(w_.x, s_); ${dest}[4 * g + 1] = word_to_cfloat(w_.y, s_);
                ${dest}[4 * g + 2] = word_to_cfloat(w_.z, s_); ${dest}[4 * g + 3] = word_to_cfloat(w_.w, s_);
            }
        }
</%def>

<%def name="store(name, src, norm2=None)">\
        {   /* ${name} at site i = ${src}, its norm the largest |part|${"; " + norm2 + " += |stored|^2" if norm2 else ""} */
            float m_ = 0;
            for (int k = 0; k < 12; k++)
                m_ = fmax(m_, fmax(fabs(${src}[k].x), fabs(${src}[k].y)));
            ${name}_norm[i] = m_;
            const float inv_ = m_ > 0 ? ${repr(float(half_max))}f / m_ : 0.0f;
            for (int g = 0; g < 3; g++)
            {
                const int4 w_ = int4_new(cfloat_to_word(${src}[4 * g], inv_), cfloat_to_word(${src}[4 * g + 1], inv_),
                                         cfloat_to_word(${src}[4 * g + 2], inv_), cfloat_to_word(${src}[4 * g + 3], inv_));
                ((GLOBAL int4 *) ${name})[g * n + i] = w_;
% if norm2:
                const float s_ = m_ * ${repr(1.0 / half_max)}f;
                const int words_[4] = {w_.x, w_.y, w_.z, w_.w};
                for (int j = 0; j < 4; j++)
                {
                    const cfloat v_ = word_to_cfloat(words_[j], s_);
                    ${norm2} += (double) v_.x * v_.x + (double) v_.y * v_.y;
                }
% endif
            }
        }
</%def>

<%def name="reduce(values, out)">\
    /* the work-group's sums of ${", ".join(values)} to ${out}, a tree in local memory */
% for v in values:
    LOCAL_DECL double red_${v}[${wgs}];
    red_${v}[get_local_id(0)] = ${v};
% endfor
    BARRIER();
    for (unsigned int half_ = ${wgs // 2}u; half_ > 0; half_ >>= 1)
    {
        if (get_local_id(0) < half_)
        {
% for v in values:
            red_${v}[get_local_id(0)] += red_${v}[get_local_id(0) + half_];
% endfor
        }
        BARRIER();
    }
    if (get_local_id(0) == 0)
    {
% for j, v in enumerate(values):
        ${out}[${len(values)} * get_group_id(0) + ${j}] = red_${v}[0];
% endfor
    }
</%def>

<%def name="sites()">for (u64 i = get_global_id(0); i < n; i += get_global_size(0))</%def>

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void half_axpy(GLOBAL chalf * RESTRICT y, GLOBAL float * RESTRICT y_norm,
    GLOBAL const chalf * RESTRICT x, GLOBAL const float * RESTRICT x_norm, float a_re, float a_im, u64 n)
{
    ${sites()}
    {
        cfloat xv[12], yv[12];
${load("x", "xv")}
${load("y", "yv")}
        for (int k = 0; k < 12; k++)
            yv[k] = cfloat_new(yv[k].x + a_re * xv[k].x - a_im * xv[k].y, yv[k].y + a_re * xv[k].y + a_im * xv[k].x);
${store("y", "yv")}
    }
}

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void half_xpay(GLOBAL chalf * RESTRICT y, GLOBAL float * RESTRICT y_norm,
    GLOBAL const chalf * RESTRICT x, GLOBAL const float * RESTRICT x_norm, float b_re, float b_im, u64 n)
{
    ${sites()}
    {
        cfloat xv[12], yv[12];
${load("x", "xv")}
${load("y", "yv")}
        for (int k = 0; k < 12; k++)
            yv[k] = cfloat_new(xv[k].x + b_re * yv[k].x - b_im * yv[k].y, xv[k].y + b_re * yv[k].y + b_im * yv[k].x);
${store("y", "yv")}
    }
}

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void half_axpy_norm(GLOBAL chalf * RESTRICT y, GLOBAL float * RESTRICT y_norm,
    GLOBAL const chalf * RESTRICT x, GLOBAL const float * RESTRICT x_norm, float a_re, float a_im, u64 n,
    GLOBAL double * RESTRICT partial)
{
    double sum = 0;
    ${sites()}
    {
        cfloat xv[12], yv[12];
${load("x", "xv")}
${load("y", "yv")}
        for (int k = 0; k < 12; k++)
            yv[k] = cfloat_new(yv[k].x + a_re * xv[k].x - a_im * xv[k].y, yv[k].y + a_re * xv[k].y + a_im * xv[k].x);
${store("y", "yv", "sum")}
    }
${reduce(["sum"], "partial")}
}

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void half_norm2(GLOBAL const chalf * RESTRICT x,
    GLOBAL const float * RESTRICT x_norm, u64 n, GLOBAL double * RESTRICT partial)
{
    double sum = 0;
    ${sites()}
    {
        cfloat xv[12];
${load("x", "xv")}
        for (int k = 0; k < 12; k++)
            sum += (double) xv[k].x * xv[k].x + (double) xv[k].y * xv[k].y;
    }
${reduce(["sum"], "partial")}
}

KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void half_dot(GLOBAL const chalf * RESTRICT x,
    GLOBAL const float * RESTRICT x_norm, GLOBAL const chalf * RESTRICT y,
    GLOBAL const float * RESTRICT y_norm, u64 n, GLOBAL double * RESTRICT partial)
{
    double re = 0, im = 0;
    ${sites()}
    {
        cfloat xv[12], yv[12];
${load("x", "xv")}
${load("y", "yv")}
        for (int k = 0; k < 12; k++)
        {   /* conj(x) y */
            re += (double) xv[k].x * yv[k].x + (double) xv[k].y * yv[k].y;
            im += (double) xv[k].x * yv[k].y - (double) xv[k].y * yv[k].x;
        }
    }
${reduce(["re", "im"], "partial")}
}
