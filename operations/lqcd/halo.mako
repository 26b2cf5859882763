## Gather the faces of one parity of a block's spinor into one send buffer, face after face.
## Variables (validated by operations/lqcd/distributed.py):
##   cplx              "cfloat" or "cdouble"
##   dims              the block's extents (X, Y, Z, T), all even
##   parity            the parity of the spinor packed
##   sections          [(mu, step, offset, face_sites)]: step +1 packs the face at x_mu = L - 1
##                     (sent forward), -1 the face at x_mu = 0 (sent backward); a section holds
##                     12 components x face_sites, component major
##   wgs               work-group size
##   comps             spinor components each work-item copies (1, 3 or 12): 12 / comps
##                     work-items per face site, component groups slowest
##   sixteen           (optional, default False) the spinor in 16-bit storage (half.py: three
##                     int4 words a site, group major, and a float norm): kernel pack_p<parity>_h
##                     copies a site a work-item, its words and norm as they are, into a
##                     section laid out as 3 x face_sites int4 words, then face_sites norms
## Face order: the other three coordinates, x fastest, lexicographic, halved (partition.py).
<%
    X, Y, Z, T = dims
    VH = X * Y * Z * T // 2
    C = cplx
    total = sum(fh for _, _, _, fh in sections)
    sixteen = context.get("sixteen", False)
    groups = 1 if sixteen else 12 // comps
%>
% if sixteen:
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void pack_p${parity}_h(
    GLOBAL ${C} * RESTRICT send, GLOBAL const int4 * RESTRICT in, GLOBAL const float * RESTRICT in_norm)
% else:
KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void pack_p${parity}(
    GLOBAL ${C} * RESTRICT send, GLOBAL const ${C} * RESTRICT in)
% endif
{
    const unsigned int id = get_global_id(0);
    if (id >= ${total * groups}u)
        return;
% if not sixteen:
    const unsigned int k0 = (id / ${total}u) * ${comps}u;  /* the first component copied */
% endif
    unsigned int i = id % ${total}u;
% for mu, step, offset, fh in sections:
<%
    names = [v for nu, v in enumerate("xyzt") if nu != mu]
    ext = [n for nu, n in enumerate(dims) if nu != mu]
    fixed = (dims[mu] - 1) if step == 1 else 0
%>\
    if (i < ${fh}u)
    {   /* direction ${mu}, the face at ${"xyzt"[mu]} = ${fixed} */
        const unsigned int lex = 2u * i;
        unsigned int ${names[0]} = lex % ${ext[0]}u;
        const unsigned int ${names[1]} = (lex / ${ext[0]}u) % ${ext[1]}u;
        const unsigned int ${names[2]} = lex / ${ext[0] * ext[1]}u;
        const unsigned int ${"xyzt"[mu]} = ${fixed}u;
        ${names[0]} += (${parity}u + x + y + z + t) & 1u;
        const unsigned int cb = (((t * ${Z}u + z) * ${Y}u + y) * ${X}u + x) >> 1;
% if sixteen:
        for (unsigned int g = 0; g < 3u; g++)
            ((GLOBAL int4 *) (send + ${offset}u))[g * ${fh}u + i] = in[g * ${VH}u + cb];
        ((GLOBAL float *) (send + ${offset + 6 * fh}u))[i] = in_norm[cb];
% else:
        for (unsigned int k = k0; k < k0 + ${comps}u; k++)
            send[${offset}u + k * ${fh}u + i] = in[k * ${VH}u + cb];
% endif
        return;
    }
    i -= ${fh}u;
% endfor
}
