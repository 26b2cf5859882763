## The distributed dslash's own parts: what a partitioned block's kernels (dslash.mako with
## the render argument dist, operations/lqcd/distributed.py) add to the site update.
## dslash.mako includes this file by the name dist["regions"] gives, and only for those
## kernels: the single-GPU kernels never render it, so work here leaves their sources (and
## the tuned results keyed on those sources) as they are. Include arguments:
##   part      "head": the region's kernel from its signature to the site cb it updates
##             (dist["region"]: "all", "interior", "exterior" or "fused", see dslash.mako);
##             "skip": after the site's coordinates, the boundary sites an interior update
##             leaves to the exterior's.
##             With dir_split > 1 (several work-items a site, whose sums meet at a barrier;
##             not the fused region, whose kernel takes one work-item a site) no work-item
##             returns early: the head gives a site that is not updated the
##             index 0xFFFFFFFF (past every site: dslash.mako's "cb < VH" tests skip it), and
##             makes the skip itself, from the site's coordinates.
##   parity, dagger, xpay, bounds, G, GG, suffix, spinors   (head) the variant, the kernel's
##             bounds, link and ghost link types, the name's storage suffix (half: "_shs" and
##             so on) and the parameters of out, in and x_in as dslash.mako renders them
## Render variables as dslash.mako's (dist, dims, wgs, cplx, real, backend).
<%page args="part, parity=0, dagger=False, xpay=False, bounds='', G='', GG='', suffix='', spinors=()"/>\
<%
    def spinor(name, const):
        return f"GLOBAL {'const ' if const else ''}{cplx} * RESTRICT {name}"

    split = context.get("dir_split", 1)
    SPG = wgs // split  # sites a work-group takes

    def edges(c):
        """Whether the site of coordinates c[0..3] has a hop off the block ("" when nothing
        is partitioned)."""
        return " || ".join(f"{c[mu]} == 0u || {c[mu]} == {dims[mu] - 1}u"
                           for mu in range(4) if dist["partitioned"][mu])
%>\
% if part == "head":
KERNEL ${bounds} void dslash_dist_p${parity}${"_dag" if dagger else ""}${"_xpay" if xpay else ""}${suffix}_${dist["region"]}(
    ${spinors[0]}, ${spinors[1]},
    GLOBAL const ${G} * RESTRICT gauge,
    ${spinors[2]}, ${real} a,
    ${spinor("ghost", True)},
    GLOBAL const ${GG} * RESTRICT gauge_ghost,
    GLOBAL const unsigned int * RESTRICT sites, unsigned int nsites${"," if dist["region"] == "fused" else ")"}
% if dist["region"] == "fused":
    GLOBAL unsigned int * tickets, GLOBAL const unsigned int * arrivals,
    GLOBAL const unsigned int * RESTRICT words, unsigned int nwords, unsigned int count)
% endif
{
% if dist["region"] == "exterior" and split > 1:
    const unsigned int e_ = get_group_id(0) * ${SPG}u + get_local_id(0) % ${SPG}u;
    const unsigned int cb = e_ < nsites ? sites[e_] : 0xFFFFFFFFu;
% elif dist["region"] == "exterior":
    if (get_global_id(0) >= nsites)
        return;
    const unsigned int cb = sites[get_global_id(0)];
% elif dist["region"] == "fused":
<% assert split == 1, "the fused kernel takes one work-item a site" %>\
    /* interior and exterior in one launch: groups take tickets in the order they start; the
       first ${dist["interior_groups"]} update the interior sites, the rest the boundary
       sites once every word of arrivals named in words has reached count (the neighbours'
       faces are in). A group that waits started after every interior group, so it never
       holds back work that it waits for. The last ticket resets the counter for the next launch. */
    LOCAL_DECL unsigned int ticket_;
    if (get_local_id(0) == 0)
    {
% if backend == "cuda":
        const unsigned int ticket = atomicAdd(tickets, 1u);
        if (ticket == get_num_groups(0) - 1u)
            atomicExch(tickets, 0u);
% else:
        const unsigned int ticket = atomic_inc(tickets);
        if (ticket == get_num_groups(0) - 1u)
            atomic_xchg(tickets, 0u);
% endif
        if (ticket >= ${dist["interior_groups"]}u)  /* a boundary group: wait for the faces */
        {
            for (unsigned int w_ = 0; w_ < nwords; w_++)
                while ((int) (((volatile GLOBAL const unsigned int *) arrivals)[words[w_]] - count) < 0)
                    ;
% if backend == "cuda":
            __threadfence_system();  /* the faces written before the count are seen after it */
% else:
            mem_fence(CLK_GLOBAL_MEM_FENCE);
% endif
        }
        ticket_ = ticket;
    }
    BARRIER();  /* the group's ticket, and (boundary groups) the faces, for every work-item */
    const bool interior_ = ticket_ < ${dist["interior_groups"]}u;
    const unsigned int e_ = interior_ ? ticket_ * ${wgs}u + get_local_id(0)
                                      : (ticket_ - ${dist["interior_groups"]}u) * ${wgs}u + get_local_id(0);
    if (e_ >= (interior_ ? VH : nsites))
        return;
    const unsigned int cb = interior_ ? e_ : sites[e_];
% elif split > 1:
    unsigned int cb = get_group_id(0) * ${SPG}u + get_local_id(0) % ${SPG}u;
% else:
    const unsigned int cb = get_global_id(0);
    if (cb >= VH)
        return;
% endif
% if split > 1 and dist["region"] == "interior" and edges("xyzt"):
<%
    X2, Y, Z = dims[0] // 2, dims[1], dims[2]
    y, z, t = f"(r_ % {Y}u)", f"(r_ / {Y}u % {Z}u)", f"(r_ / {Y * Z}u)"
    x = f"(2u * (cb - r_ * {X2}u) + (({parity}u + {y} + {z} + {t}) & 1u))"
%>\
    if (cb < VH)
    {   /* the boundary skip, from the site's coordinates */
        const unsigned int r_ = cb / ${X2}u;
        if (${edges((x, y, z, t))})
            cb = 0xFFFFFFFFu;  /* a boundary site: the exterior update's */
    }
% endif
% elif part == "skip":
% if split == 1 and dist["region"] in ("interior", "fused") and edges("xyzt"):
% if dist["region"] == "fused":
    if (interior_ && (${edges("xyzt")}))
% else:
    if (${edges("xyzt")})
% endif
        return;  /* a boundary site: the exterior kernel's, once the ghosts have arrived */
% endif
% endif
