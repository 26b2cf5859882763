## y[i] = alpha * x[i]: the example template. Variables: wgs (work-group size), ctype (C type).
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void scale(GLOBAL ${ctype} * RESTRICT y, GLOBAL const ${ctype} * RESTRICT x,
                                                 ${ctype} alpha, unsigned int n)
{
    const size_t i = get_global_id(0);
    if (i < n)
        y[i] = alpha * x[i];
}
