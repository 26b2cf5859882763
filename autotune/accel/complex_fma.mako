## Complex multiply-adds as fused multiply-adds, for cfloat and cdouble (the portability
## header's complex numbers). Included by the templates that use them, not part of the
## portability header: every stored result's fingerprint covers the header, so an addition there
## would make every tuned result stale, while an include is covered only in its users'.
% for real, cplx in (("float", "cfloat"), ("double", "cdouble")):
% if real == "double" and backend == "opencl":
#ifdef cl_khr_fp64
% endif
/* a s + b, s real: two fused multiply-adds */
DEVICE_FN ${cplx} ${cplx}_scale_add(${cplx} a, ${real} s, ${cplx} b) { return ${cplx}_new(fma(a.x, s, b.x), fma(a.y, s, b.y)); }
/* a b + c: four fused multiply-adds (a sum of products chained through these rounds once a term) */
DEVICE_FN ${cplx} ${cplx}_mul_add(${cplx} a, ${cplx} b, ${cplx} c)
{
    return ${cplx}_new(fma(a.x, b.x, fma(-a.y, b.y, c.x)), fma(a.x, b.y, fma(a.y, b.x, c.y)));
}
/* conj(a) b + c: four fused multiply-adds */
DEVICE_FN ${cplx} ${cplx}_conj_mul_add(${cplx} a, ${cplx} b, ${cplx} c)
{
    return ${cplx}_new(fma(a.x, b.x, fma(a.y, b.y, c.x)), fma(a.x, b.y, fma(-a.y, b.x, c.y)));
}
% if real == "double" and backend == "opencl":
#endif
% endif
% endfor
