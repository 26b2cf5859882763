## 16-bit fixed-point complex numbers (half precision storage, operations/lqcd/half.py): a value
## is (x, y) * scale, the scale kept beside the data (a norm per site, or a constant);
## arithmetic is in float. Included by kernels that read or write half precision fields.
typedef short2 chalf;
DEVICE_FN chalf chalf_new(short re, short im) { chalf r; r.x = re; r.y = im; return r; }
DEVICE_FN cfloat chalf_to_cfloat(chalf a, float scale) { return cfloat_new(a.x * scale, a.y * scale); }
/* a * inv rounded to the nearest integer: |a * inv| <= 32767 is the caller's duty */
DEVICE_FN chalf cfloat_to_chalf(cfloat a, float inv) { return chalf_new((short) rint(a.x * inv), (short) rint(a.y * inv)); }
