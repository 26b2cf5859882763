## Portability header: prepended to every kernel so that one template compiles as CUDA C++
## and as OpenCL C. Variables: backend ("cuda" or "opencl").
## Kernels are declared as  KERNEL [REQD_WORK_GROUP_SIZE(x, y, z)] void name(GLOBAL float *p, ...).
/* ---- autotune portability header (${backend}) ---- */
% if backend == "cuda":
#define KERNEL extern "C" __global__
#define DEVICE_FN __device__ __forceinline__
#define GLOBAL
#define LOCAL
#define LOCAL_DECL __shared__
#define CONSTANT const
#define RESTRICT __restrict__
#define BARRIER() __syncthreads()
#define REQD_WORK_GROUP_SIZE(x, y, z) __launch_bounds__((x) * (y) * (z))
DEVICE_FN unsigned int get_local_id(int d) { return d == 0 ? threadIdx.x : d == 1 ? threadIdx.y : threadIdx.z; }
DEVICE_FN unsigned int get_group_id(int d) { return d == 0 ? blockIdx.x : d == 1 ? blockIdx.y : blockIdx.z; }
DEVICE_FN unsigned int get_local_size(int d) { return d == 0 ? blockDim.x : d == 1 ? blockDim.y : blockDim.z; }
DEVICE_FN unsigned int get_num_groups(int d) { return d == 0 ? gridDim.x : d == 1 ? gridDim.y : gridDim.z; }
DEVICE_FN size_t get_global_id(int d) { return (size_t) get_group_id(d) * get_local_size(d) + get_local_id(d); }
DEVICE_FN size_t get_global_size(int d) { return (size_t) get_num_groups(d) * get_local_size(d); }
DEVICE_FN float fma_f(float a, float b, float c) { return fmaf(a, b, c); }
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
% else:
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#define KERNEL __kernel
#define DEVICE_FN static inline
#define GLOBAL __global
#define LOCAL __local
#define LOCAL_DECL __local
#define CONSTANT __constant
#define RESTRICT restrict
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define REQD_WORK_GROUP_SIZE(x, y, z) __attribute__((reqd_work_group_size(x, y, z)))
#define make_float2(x, y) ((float2) ((x), (y)))
#define make_float4(x, y, z, w) ((float4) ((x), (y), (z), (w)))
#define make_double2(x, y) ((double2) ((x), (y)))
#define make_int2(x, y) ((int2) ((x), (y)))
DEVICE_FN float fma_f(float a, float b, float c) { return fma(a, b, c); }
% endif

/* Complex numbers as two-component vectors: x is the real part, y the imaginary part. */
% for real, cplx in (("float", "cfloat"), ("double", "cdouble")):
% if real == "double" and backend == "opencl":
#ifdef cl_khr_fp64
% endif
typedef ${real}2 ${cplx};
DEVICE_FN ${cplx} ${cplx}_new(${real} re, ${real} im) { ${cplx} r; r.x = re; r.y = im; return r; }
DEVICE_FN ${real} ${cplx}_real(${cplx} a) { return a.x; }
DEVICE_FN ${real} ${cplx}_imag(${cplx} a) { return a.y; }
DEVICE_FN ${cplx} ${cplx}_add(${cplx} a, ${cplx} b) { return ${cplx}_new(a.x + b.x, a.y + b.y); }
DEVICE_FN ${cplx} ${cplx}_sub(${cplx} a, ${cplx} b) { return ${cplx}_new(a.x - b.x, a.y - b.y); }
DEVICE_FN ${cplx} ${cplx}_mul(${cplx} a, ${cplx} b) { return ${cplx}_new(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
DEVICE_FN ${cplx} ${cplx}_conj(${cplx} a) { return ${cplx}_new(a.x, -a.y); }
/* conj(a) * b, the building block of <x, y> */
DEVICE_FN ${cplx} ${cplx}_conj_mul(${cplx} a, ${cplx} b) { return ${cplx}_new(a.x * b.x + a.y * b.y, a.x * b.y - a.y * b.x); }
DEVICE_FN ${cplx} ${cplx}_scale(${cplx} a, ${real} s) { return ${cplx}_new(a.x * s, a.y * s); }
DEVICE_FN ${real} ${cplx}_abs2(${cplx} a) { return a.x * a.x + a.y * a.y; }
% if real == "double" and backend == "opencl":
#endif
% endif
% endfor
/* ---- end of portability header ---- */
