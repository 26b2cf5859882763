## tune_kernel's answer check on the device: far[0] is set to 1 where any element of result is
## not within bound of expected (|result - expected| <= bound, as Closeness on the host; NaN is
## not within). Every work-item that finds one writes the same 1: no atomics needed.
## Variables: ctype (float or double), wgs (work-group size).
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void count_far(GLOBAL unsigned int *far,
        GLOBAL const ${ctype} * RESTRICT result, GLOBAL const ${ctype} * RESTRICT expected,
        GLOBAL const ${ctype} * RESTRICT bound, unsigned int n)
{
    const size_t i = get_global_id(0);
    if (i < n) {
        const ${ctype} d = fabs(result[i] - expected[i]);
        if (!(d <= bound[i]))
            far[0] = 1u;
    }
}
