## 16-bit fixed-point complex numbers (half precision storage, operations/lqcd/half.py): a value
## is (x, y) * scale, the scale kept beside the data (a norm per site, or a constant);
## arithmetic is in float. Included by kernels that read or write half precision fields.
## A spinor's values come in groups of four chalf per site (16 bytes: one int4 load, a word
## per component).
## Variables: half_bits (optional, default False): turn 16-bit integers into floats with integer
## and float arithmetic instead of conversion instructions (which issue at a quarter of the
## float rate or less on NVIDIA GPUs).
<% half_bits = context.get("half_bits", False) %>\
typedef short2 chalf;
DEVICE_FN chalf chalf_new(short re, short im) { chalf r; r.x = re; r.y = im; return r; }
% if half_bits:
/* v with its sign bit flipped is v + 32768 in offset binary; placed under the exponent of 2^23
   it reads as the float 2^23 + 32768 + v, exactly, and one subtraction leaves v */
DEVICE_FN float s16_to_float(short v)
{
    const unsigned int bits = ((unsigned int) (unsigned short) v) ^ 0x4B008000u;
% if backend == "cuda":
    return __uint_as_float(bits) - 8421376.0f;
% else:
    return as_float(bits) - 8421376.0f;
% endif
}
/* the same for a 32-bit word holding a chalf (real part in the low half) */
DEVICE_FN cfloat word_to_cfloat(int w, float scale)
{
    const unsigned int u = (unsigned int) w;
% if backend == "cuda":
    return cfloat_new((__uint_as_float((u & 0xFFFFu) ^ 0x4B008000u) - 8421376.0f) * scale,
                      (__uint_as_float((u >> 16) ^ 0x4B008000u) - 8421376.0f) * scale);
% else:
    return cfloat_new((as_float((u & 0xFFFFu) ^ 0x4B008000u) - 8421376.0f) * scale,
                      (as_float((u >> 16) ^ 0x4B008000u) - 8421376.0f) * scale);
% endif
}
% else:
DEVICE_FN float s16_to_float(short v) { return (float) v; }
DEVICE_FN cfloat word_to_cfloat(int w, float scale) { return cfloat_new((float) (short) w * scale, (float) (w >> 16) * scale); }
% endif
DEVICE_FN cfloat chalf_to_cfloat(chalf a, float scale) { return cfloat_new(s16_to_float(a.x) * scale, s16_to_float(a.y) * scale); }
/* a * inv rounded, as the 32-bit word of a chalf */
DEVICE_FN int cfloat_to_word(cfloat a, float inv)
{
    return (int) (((unsigned int) (unsigned short) (short) rint(a.x * inv))
                  | (((unsigned int) (unsigned short) (short) rint(a.y * inv)) << 16));
}
% if backend == "cuda":
DEVICE_FN int4 int4_new(int a, int b, int c, int d) { return make_int4(a, b, c, d); }
% else:
DEVICE_FN int4 int4_new(int a, int b, int c, int d) { return (int4) (a, b, c, d); }
% endif
/* a * inv rounded to the nearest integer: |a * inv| <= 32767 is the caller's duty */
DEVICE_FN chalf cfloat_to_chalf(cfloat a, float inv) { return chalf_new((short) rint(a.x * inv), (short) rint(a.y * inv)); }
