## A toy kernel for tuner tests: y = factor * x, with a work-group size and a "wrong" variant.
KERNEL void toy(GLOBAL float *y, GLOBAL const float *x, unsigned int n)
{
    const size_t i = get_global_id(0);
    if (i < n)
        y[i] = ${"x[i] + 1.0f" if wrong else "x[i]"} * ${factor};
}
