## A kernel whose cost grows with a runtime argument: y = x iterated `reps` times.
KERNEL void busy(GLOBAL float *y, GLOBAL const float *x, unsigned int n, unsigned int reps)
{
    const size_t i = get_global_id(0);
    if (i < n) {
        float v = x[i];
        for (unsigned int r = 0; r < reps; ++r)
            v = v * 0.999f + 0.001f;
        y[i] = v;
    }
}
