## The distributed dslash's own parts: what a partitioned block's kernels (dslash.mako with
## the render argument dist, operations/lqcd/distributed.py) add to the site update.
## dslash.mako includes this file by the name dist["regions"] gives, and only for those
## kernels: the single-GPU kernels never render it, so work here leaves their sources (and
## the tuned results keyed on those sources) as they are. Include arguments:
##   part      "head": the region's kernel from its signature to the site cb it updates
##             (dist["region"]: "all", "interior", "exterior" or "fused", see dslash.mako);
##             "skip": after the site's coordinates, the boundary sites an interior update
##             leaves to the exterior's.
##             With dir_split > 1 (several work-items a site, whose sums meet at a barrier)
##             no work-item returns early: the head gives a site that is not updated the
##             index 0xFFFFFFFF (past every site: dslash.mako's "cb < VH" tests skip it), and
##             makes the skip itself, from the site's coordinates.
##             The fused region's head also says which groups update the interior sites
##             (interior_, a group's): dslash.mako renders its site update twice, without the
##             ghost hops for those groups and with them for the others.
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
    GLOBAL const unsigned int * arrivals,
    GLOBAL const unsigned int * RESTRICT words, unsigned int nwords,
    GLOBAL const unsigned int * RESTRICT expect)
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
<%
    I, lead = dist["interior_groups"], dist["lead"]
    assert 0 <= lead <= I, "the boundary groups start among the interior ones"
%>\
    /* interior and exterior in one launch, without a ticket to take (a ticket's atomic
       before every group's first load cost the short groups of several work-items a site
       more than the boundary's update saves): groups 0 to ${lead - 1} and from ${lead} plus
       the boundary groups on update the ${I} groups' worth of interior sites, the ones between
       the boundary sites, once every word of arrivals named in words has reached *expect (the
       neighbours' faces are in: the exchange began beside the launch and has had the first
       groups' time to arrive). The device starts groups in the order of their ids, so a group
       that waits starts after ${lead} interior groups; nothing it waits for needs this launch's
       groups (the faces come from the neighbours' packing and copies). */
    const unsigned int boundary_ = get_num_groups(0) - ${I}u;  /* the boundary groups */
    const unsigned int group_ = get_group_id(0);
    const bool interior_ = group_ < ${lead}u || group_ >= ${lead}u + boundary_;
    if (!interior_)
    {   /* a boundary group: wait for the faces */
        if (get_local_id(0) == 0)
        {
            const unsigned int count_ = *expect;
            for (unsigned int w_ = 0; w_ < nwords; w_++)
                while ((int) (((volatile GLOBAL const unsigned int *) arrivals)[words[w_]] - count_) < 0)
                    ;
% if backend == "cuda":
            __threadfence_system();  /* the faces written before the count are seen after it */
% else:
            mem_fence(CLK_GLOBAL_MEM_FENCE);
% endif
        }
        BARRIER();  /* the faces, for every work-item of the group */
    }
    const unsigned int g_ = group_ < ${lead}u ? group_ : interior_ ? group_ - boundary_ : group_ - ${lead}u;
% if split > 1:
    /* several work-items a site: none returns early (their sums meet at a barrier) */
    const unsigned int e_ = g_ * ${SPG}u + get_local_id(0) % ${SPG}u;
    unsigned int cb = interior_ ? (e_ < VH ? e_ : 0xFFFFFFFFu) : (e_ < nsites ? sites[e_] : 0xFFFFFFFFu);
% else:
    const unsigned int e_ = g_ * ${wgs}u + get_local_id(0);
    if (e_ >= (interior_ ? VH : nsites))
        return;
    const unsigned int cb = interior_ ? e_ : sites[e_];
% endif
% elif split > 1:
    unsigned int cb = get_group_id(0) * ${SPG}u + get_local_id(0) % ${SPG}u;
% else:
    const unsigned int cb = get_global_id(0);
    if (cb >= VH)
        return;
% endif
% if split > 1 and dist["region"] in ("interior", "fused") and edges("xyzt"):
<%
    X2, Y, Z = dims[0] // 2, dims[1], dims[2]
    y, z, t = f"(r_ % {Y}u)", f"(r_ / {Y}u % {Z}u)", f"(r_ / {Y * Z}u)"
    x = f"(2u * (cb - r_ * {X2}u) + (({parity}u + {y} + {z} + {t}) & 1u))"
%>\
    if (${"interior_ && " if dist["region"] == "fused" else ""}cb < VH)
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
