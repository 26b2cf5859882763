## Spinor fields between the host's layout and the device's, on the device: the host's
## (T, Z, Y, X, 4, 3) array, lexicographic sites of 12 complex numbers each, as one flat
## complex128 array, and the operators' (2, 12, V/2) fields, each parity's sites in
## checkerboard order and component-major (lattice.py), in ${dst}. A site of a parity per
## work-item; both parities in one pass.
## Variables: dst ("cfloat" or "cdouble"), wgs.
% if backend == "cuda":
typedef unsigned long long u64;
% else:
typedef ulong u64;
% endif
<%
    real = "float" if dst == "cfloat" else "double"
    def down(expr):
        return expr if dst == "cdouble" else f"cfloat_new((float) ({expr}).x, (float) ({expr}).y)"
%>

/* The lexicographic site of checkerboard site i of parity p: X is even, so every row of X
   sites holds X/2 of each parity, and the row's first site of parity p is at x = (p + y + z + t) % 2.
   hx = X / 2; rows of a (t, z) plane: ny; planes of a t slice: nz. */
DEVICE_FN u64 lexicographic(u64 i, unsigned int p, u64 hx, u64 ny, u64 nz)
{
    const u64 row = i / hx;
    const u64 y = row % ny, z = (row / ny) % nz, t = row / (ny * nz);
    return 2 * i + ((p + y + z + t) & 1);
}

/* out[p][k][i] = in[lexicographic(i, p)][k], in the device's precision */
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void to_checkerboard(
    GLOBAL ${dst} * RESTRICT out, GLOBAL const cdouble * RESTRICT in, u64 vh, u64 hx, u64 ny,
    u64 nz)
{
    for (u64 i = get_global_id(0); i < vh; i += get_global_size(0))
        for (unsigned int p = 0; p < 2; p++)
        {
            const u64 site = lexicographic(i, p, hx, ny, nz) * 12;
            for (int k = 0; k < 12; k++)
                out[(p * 12 + k) * vh + i] = ${down("in[site + k]")};
        }
}

/* out[lexicographic(i, p)][k] = in[p][k][i], in double precision */
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void from_checkerboard(
    GLOBAL cdouble * RESTRICT out, GLOBAL const ${dst} * RESTRICT in, u64 vh, u64 hx, u64 ny,
    u64 nz)
{
    for (u64 i = get_global_id(0); i < vh; i += get_global_size(0))
        for (unsigned int p = 0; p < 2; p++)
        {
            const u64 site = lexicographic(i, p, hx, ny, nz) * 12;
            for (int k = 0; k < 12; k++)
            {
                const ${dst} v = in[(p * 12 + k) * vh + i];
                out[site + k] = cdouble_new((double) v.x, (double) v.y);
            }
        }
}
