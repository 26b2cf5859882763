## y[0..n) = value, after a dependent loop of `reps` steps that leaves it unchanged
## (v = v * one + zero, with one = 1 and zero = 0 given at run time, so the loop stays):
## a long kernel with an exact result, for tests of the order between two streams.
KERNEL void slow_fill(GLOBAL double *y, double value, double one, double zero, unsigned int n,
                      unsigned int reps)
{
    const size_t i = get_global_id(0);
    if (i < n) {
        double v = value;
        for (unsigned int r = 0; r < reps; ++r)
            v = v * one + zero;
        y[i] = v;
    }
}
