## One explicit step of 2-D heat diffusion on an ny x nx float32 field (row-major, x fastest):
##     dst[y][x] = src[y][x]
##                 + dt * (src[y+1][x] + src[y][x+1] - 4 src[y][x] + src[y][x-1] + src[y-1][x])
## at interior points; boundary points are copied unchanged, so dst is a complete field.
## Variables (validated by operations/diffusion.py before rendering):
##   nx, ny            field size (compiled in)
##   kernel_tuner      False: the tunable parameters below are compiled in as numbers.
##                     True: they are left to the macros Kernel Tuner defines (block_size_x,
##                     block_size_y, tile_size_x, tile_size_y, use_local), so that Kernel Tuner
##                     tunes exactly this source (benchmarks/diffusion_vs_kernel_tuner.py).
##   block_x, block_y  work-group shape (these five are None when kernel_tuner)
##   tile_x, tile_y    points per work-item in x and y, block_x (block_y) apart so that
##                     neighbouring work-items touch neighbouring addresses
##   use_local         the tuning parameter `local` (a name Mako reserves): stage the work-group's
##                     (block_y*tile_y + 2) x (block_x*tile_x + 2) points, halo included, in
##                     local memory, or read global memory directly
% if kernel_tuner:
#define BLOCK_X block_size_x
#define BLOCK_Y block_size_y
#define TILE_X tile_size_x
#define TILE_Y tile_size_y
#define USE_LOCAL use_local
% else:
#define BLOCK_X ${block_x}
#define BLOCK_Y ${block_y}
#define TILE_X ${tile_x}
#define TILE_Y ${tile_y}
#define USE_LOCAL ${1 if use_local else 0}
% endif
#define NX ${nx}
#define NY ${ny}
/* The points one work-group updates: TILE_H rows of TILE_W. */
#define TILE_W (BLOCK_X * TILE_X)
#define TILE_H (BLOCK_Y * TILE_Y)
#if USE_LOCAL
/* Distance between vertically adjacent points in the array the stencil reads. */
#define ROW (TILE_W + 2)
#else
#define ROW NX
#endif

KERNEL REQD_WORK_GROUP_SIZE(BLOCK_X, BLOCK_Y, 1) void diffuse(
    GLOBAL float * RESTRICT dst, GLOBAL const float * RESTRICT src, float dt)
{
    const int lx = (int) get_local_id(0);
    const int ly = (int) get_local_id(1);
    const int x0 = (int) get_group_id(0) * TILE_W;  /* the work-group's first point */
    const int y0 = (int) get_group_id(1) * TILE_H;
#if USE_LOCAL
    /* halo[i][j] holds src[y0 + i - 1][x0 + j - 1] where that point exists; the work-items
       load it together, row after row. */
    LOCAL_DECL float halo[TILE_H + 2][TILE_W + 2];
    for (int k = ly * BLOCK_X + lx; k < (TILE_H + 2) * (TILE_W + 2); k += BLOCK_X * BLOCK_Y)
    {
        const int i = k / (TILE_W + 2);
        const int j = k - i * (TILE_W + 2);
        const int y = y0 + i - 1;
        const int x = x0 + j - 1;
        if (x >= 0 && x < NX && y >= 0 && y < NY)
            halo[i][j] = src[y * NX + x];
    }
    BARRIER();
#endif
    #pragma unroll
    for (int ty = 0; ty < TILE_Y; ty++)
    {
        const int y = y0 + ly + ty * BLOCK_Y;
        #pragma unroll
        for (int tx = 0; tx < TILE_X; tx++)
        {
            const int x = x0 + lx + tx * BLOCK_X;
            if (x < NX && y < NY)
            {
#if USE_LOCAL
                LOCAL const float *c = &halo[ly + ty * BLOCK_Y + 1][lx + tx * BLOCK_X + 1];
#else
                GLOBAL const float *c = src + y * NX + x;
#endif
                float u = c[0];
                if (x > 0 && x < NX - 1 && y > 0 && y < NY - 1)
                    u = c[0] + dt * (c[ROW] + c[1] - 4.0f * c[0] + c[-1] + c[-ROW]);
                dst[y * NX + x] = u;
            }
        }
    }
}
