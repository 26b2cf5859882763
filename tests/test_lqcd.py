"""Wilson operator: against a block matrix built site by site, symmetries, free field, compression."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autotune import tune
from autotune.tune.store import ResultStore
from operations.lqcd import (GAMMA, GAMMA5, DslashTemplate, WilsonOperator, haar_field, pack,
                             plaquette, reference, unitarity_violation, unpack, weak_field)

from device_breadth import only_on_gpus, variants

DIMS = (4, 4, 6, 8)  # unequal extents: X, Y, Z, T
SHAPE = (8, 6, 4, 4)
KAPPA = 0.124
TOL = {"double": 1e-13, "single": 2e-6}


def _spinor(seed, shape=SHAPE):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape + (4, 3)) + 1j * rng.standard_normal(shape + (4, 3))


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


class BlockMatrix:
    """D as 12x12 blocks D(x, y), written site by site from the formula (no rolls, no layout)."""

    def __init__(self, u, t_boundary):
        X, Y, Z, T = DIMS
        self.sites = list(itertools.product(range(T), range(Z), range(Y), range(X)))
        self.index = {s: i for i, s in enumerate(self.sites)}
        self.rows = []
        eye4 = np.eye(4)
        for (t, z, y, x) in self.sites:
            entries = []
            for mu in range(4):
                step = [(0, 0, 0, 1), (0, 0, 1, 0), (0, 1, 0, 0), (1, 0, 0, 0)][mu]
                ext = (T, Z, Y, X)
                fwd = tuple((c + d) % e for c, d, e in zip((t, z, y, x), step, ext))
                bwd = tuple((c - d) % e for c, d, e in zip((t, z, y, x), step, ext))
                sign_f = t_boundary if (mu == 3 and t == T - 1) else 1
                sign_b = t_boundary if (mu == 3 and t == 0) else 1
                link_f = u[mu][t, z, y, x]
                link_b = u[mu][bwd].conj().T
                entries.append((self.index[fwd], sign_f * np.kron(eye4 - GAMMA[mu], link_f)))
                entries.append((self.index[bwd], sign_b * np.kron(eye4 + GAMMA[mu], link_b)))
            self.rows.append(entries)

    def hop(self, psi):
        flat = psi.reshape(len(self.sites), 12)
        out = np.zeros_like(flat)
        for i, entries in enumerate(self.rows):
            for j, block in entries:
                out[i] += block @ flat[j]
        return out.reshape(psi.shape)

    def parity(self):
        return np.array([(t + z + y + x) % 2 for (t, z, y, x) in self.sites]).reshape(SHAPE)


@pytest.fixture(scope="module")
def fields():
    return {"haar": haar_field(DIMS, seed=11), "weak": weak_field(DIMS, 0.1, seed=12)}


@pytest.fixture(scope="module")
def matrices(fields):
    return {(name, tb): BlockMatrix(u, tb) for name, u in fields.items() for tb in (-1, 1)}


@pytest.mark.parametrize("t_boundary", [-1, 1])
def test_numpy_reference_matches_the_block_matrix(fields, matrices, t_boundary):
    psi = _spinor(1)
    for name, u in fields.items():
        assert _rel(reference.hop(u, psi, t_boundary), matrices[name, t_boundary].hop(psi)) < 1e-14


# Each (precision, link compression) pair once, each compression and each precision under both
# time boundaries (the boundary's sign is one code path for every precision and compression;
# each combination compiles its own kernels, so all twelve would take twice as long to prove
# no more). The same fields and operators as the tests below where they coincide.
BLOCK_MATRIX_CASES = [("double", 18, 1), ("double", 12, -1), ("double", 8, -1),
                      ("single", 18, -1), ("single", 12, 1), ("single", 8, 1)]


@pytest.mark.parametrize("precision,reconstruct,t_boundary", BLOCK_MATRIX_CASES,
                         ids=[f"{p}-{r}-{t}" for p, r, t in BLOCK_MATRIX_CASES])
def test_operator_matches_the_block_matrix(context, fields, matrices, precision, reconstruct, t_boundary):
    if precision == "double" and not context.device.double_precision:
        pytest.skip("no double precision")
    u = fields["haar"]
    block = matrices["haar", t_boundary]
    op = WilsonOperator(context, u, KAPPA, precision, reconstruct, t_boundary)
    psi = _spinor(2)
    d_psi = block.hop(psi)
    tol = TOL[precision] * (10 if reconstruct == 8 else 1)
    assert _rel(op.dslash(psi), d_psi) < tol
    assert _rel(op.apply(psi), psi - KAPPA * d_psi) < tol
    # even-odd: M_pc psi_e = psi_e - kappa^2 D_eo D_oe psi_e
    even = np.where((block.parity() == 0)[..., None, None], psi, 0)
    d_oe = np.where((block.parity() == 1)[..., None, None], block.hop(even), 0)
    d_eo_d_oe = np.where((block.parity() == 0)[..., None, None], block.hop(d_oe), 0)
    assert _rel(op.apply_pc(psi), even - KAPPA**2 * d_eo_d_oe) < tol


def _g5(psi):
    return np.einsum("ab,...bc->...ac", GAMMA5, psi)


def test_gamma5_hermiticity(context, fields):
    op = WilsonOperator(context, fields["haar"], KAPPA, "double", 12)
    x, y = _spinor(3), _spinor(4)
    lhs = np.vdot(x, _g5(op.dslash(y)))
    rhs = np.vdot(_g5(op.dslash(x)), y)
    assert abs(lhs - rhs) < 1e-12 * abs(lhs)
    assert _rel(op.apply_dagger(y), _g5(op.apply(_g5(y)))) < 1e-13
    # the even-odd operator too: <M_pc x, y> = <x, M_pc^dag y> on the even sites
    ex, ey = _even(op, x), _even(op, y)
    lhs, rhs = np.vdot(op.apply_pc(ex), ey), np.vdot(ex, op.apply_pc_dagger(ey))
    assert abs(lhs - rhs) < 1e-12 * abs(lhs)


def _even(op, psi):
    parity = np.add.outer(np.add.outer(np.arange(SHAPE[0]), np.arange(SHAPE[1])),
                          np.add.outer(np.arange(SHAPE[2]), np.arange(SHAPE[3]))) % 2
    return np.where((parity == 0)[..., None, None], psi, 0)


def test_gauge_covariance(context, fields):
    u = fields["haar"]
    g = haar_field(DIMS, seed=99)[0]  # one SU(3) matrix per site
    axes = {0: 3, 1: 2, 2: 1, 3: 0}
    u2 = np.stack([g @ u[mu] @ np.swapaxes(np.roll(g, -1, axis=axes[mu]).conj(), -1, -2)
                   for mu in range(4)])
    psi = _spinor(5)
    rotate = lambda p: np.einsum("...ij,...sj->...si", g, p)  # noqa: E731
    for reconstruct in (18, 8):
        op = WilsonOperator(context, u, KAPPA, "double", reconstruct)
        op2 = WilsonOperator(context, u2, KAPPA, "double", reconstruct)
        assert _rel(op2.apply(rotate(psi)), rotate(op.apply(psi))) < 1e-12
    assert abs(plaquette(u2) - plaquette(u)) < 1e-13


@pytest.mark.parametrize("axis", [1, 2, 3])
def test_translation_invariance(context, fields, axis):
    u = fields["weak"]
    psi = _spinor(6)
    op = WilsonOperator(context, u, KAPPA, "double", 12)
    shifted = WilsonOperator(context, np.roll(u, 1, axis=axis + 1), KAPPA, "double", 12)
    assert _rel(shifted.apply(np.roll(psi, 1, axis=axis)), np.roll(op.apply(psi), 1, axis=axis)) < 1e-13


def test_time_translation_with_periodic_boundary(context, fields):
    u, psi = fields["weak"], _spinor(7)
    op = WilsonOperator(context, u, KAPPA, "double", 18, t_boundary=1)
    shifted = WilsonOperator(context, np.roll(u, 1, axis=1), KAPPA, "double", 18, t_boundary=1)
    assert _rel(shifted.dslash(np.roll(psi, 1, axis=0)), np.roll(op.dslash(psi), 1, axis=0)) < 1e-13


def test_d_couples_only_opposite_parities(context, fields):
    op = WilsonOperator(context, fields["haar"], KAPPA, "single", 8)
    even = _even(op, _spinor(8))
    result = op.dslash(even)
    assert np.max(np.abs(_even(op, result))) == 0
    assert np.max(np.abs(result)) > 1


@pytest.mark.parametrize("t_boundary", [-1, 1])
def test_free_field_plane_waves_have_the_known_eigenvalues(context, t_boundary):
    X, Y, Z, T = DIMS
    unit = np.broadcast_to(np.eye(3, dtype=complex), (4,) + SHAPE + (3, 3)).copy()
    op = WilsonOperator(context, unit, KAPPA, "double", 12, t_boundary)
    t, z, y, x = np.meshgrid(*(np.arange(n) for n in SHAPE), indexing="ij")
    rng = np.random.default_rng(9)
    for n in [(0, 0, 0, 0), (1, 0, 2, 3), (3, 1, 5, 2)]:
        shift = 0.5 if t_boundary == -1 else 0.0
        p = 2 * np.pi * np.array([n[0] / X, n[1] / Y, n[2] / Z, (n[3] + shift) / T])
        spin = sum(GAMMA[mu] * np.sin(p[mu]) for mu in range(4))
        matrix = np.eye(4) * (1 - 2 * KAPPA * np.cos(p).sum()) + 2j * KAPPA * spin
        values, vectors = np.linalg.eig(matrix)
        expected = 1 - 2 * KAPPA * np.cos(p).sum() + 2j * KAPPA * np.sqrt(np.sum(np.sin(p) ** 2)) * np.array([1, -1])
        assert all(np.min(np.abs(values - e)) < 1e-12 for e in expected)
        phase = np.exp(1j * (p[0] * x + p[1] * y + p[2] * z + p[3] * t))
        for k in range(4):
            colour = rng.standard_normal(3) + 1j * rng.standard_normal(3)
            psi = phase[..., None, None] * np.outer(vectors[:, k], colour)
            assert _rel(op.apply(psi), values[k] * psi) < 1e-12


def _near_degenerate(rng, n):
    """Links with entries at or near zero: permutations with phases, and exp of tiny algebra."""
    perms = [np.eye(3)[list(p)] for p in itertools.permutations(range(3))]
    out = []
    for i in range(n):
        m = perms[i % 6] * np.exp(1j * rng.uniform(-np.pi, np.pi, 3))[None, :]
        m = m / np.linalg.det(m) ** (1 / 3)
        out.append(m)
    small = weak_field((2, 2, 2, 2), 1e-7, seed=3).reshape(-1, 3, 3)[:n]
    return np.concatenate([np.stack(out), small])


def _awkward_field(seed):
    """Identity links, permutation matrices with phases and links within 1e-7 of the identity
    (entries at or near zero, moduli at or near one) beside Haar-random ones: every branch of
    the 8-parameter form's choices."""
    u = haar_field(DIMS, seed=seed)
    awkward = np.resize(_near_degenerate(np.random.default_rng(seed), 60), u.shape)
    awkward[0, 0] = np.eye(3)
    mask = np.random.default_rng(seed + 1).random(u.shape[:-2]) < 0.7
    return np.where(mask[..., None, None], awkward, u)


@pytest.mark.parametrize("precision,options,tol", [("double", {}, 1e-12), ("single", {}, 1e-5),
                                                   ("single", {"fast_math": True}, 1e-5),
                                                   ("half", {"fast_math": True}, 5e-3)])
def test_the_8_parameter_dslash_is_exact_on_degenerate_links(context, precision, options, tol):
    """The kernels rebuild identity, permutation and near-identity links as exactly as Haar
    ones (no division by a vanishing modulus): D and D^dagger against the numpy reference."""
    if precision == "double" and not context.device.double_precision:
        pytest.skip("no double precision")
    u = _awkward_field(31)
    from operations.lqcd import pack as pack_links

    choices = np.rint(pack_links(u, 8)[..., 4] / 3 + 1.5).astype(int)
    assert set(np.unique(choices)) == {0, 1, 2, 3}  # every exchange and row choice is met
    op = WilsonOperator(context, u, KAPPA, precision, 8, -1, tuning={"wgs": 16, **options})
    psi = _spinor(13)
    assert _rel(op.dslash(psi), reference.hop(u, psi, -1)) < tol
    want = psi - KAPPA * reference.hop(u, psi, -1, dagger=True)
    assert _rel(op.apply_dagger(psi), want) < tol


@pytest.mark.parametrize("dtype,tol12,tol8", [(np.complex128, 1e-14, 1e-12), (np.complex64, 1e-6, 1e-5)])
def test_compression_round_trips(dtype, tol12, tol8):
    rng = np.random.default_rng(5)
    haar = haar_field(DIMS, seed=21)
    identity = np.broadcast_to(np.eye(3, dtype=complex), haar.shape).copy()
    sign_flipped = haar.copy()
    sign_flipped[3, -1] *= -1  # det = -1 on the last time slice: the antiperiodic sign
    degenerate = np.resize(_near_degenerate(rng, 60), haar.shape)
    cases = {"haar": (haar, 1), "identity": (identity, 1), "sign": (sign_flipped, -1),
             "degenerate": (degenerate, 1)}
    for name, (u, tb) in cases.items():
        u = u.astype(dtype)
        for reconstruct, tol in ((12, tol12), (8, tol8)):
            back = unpack(pack(u, reconstruct, tb), reconstruct, tb)
            err = np.max(np.abs(back - u))
            assert err < tol, (name, reconstruct, err)
            assert back.dtype == np.result_type(u.dtype, np.complex64)


def test_random_fields_are_reproducible_and_plaquettes_sensible():
    assert np.array_equal(haar_field(DIMS, 4), haar_field(DIMS, 4))
    assert not np.array_equal(haar_field(DIMS, 4), haar_field(DIMS, 5))
    for u in (haar_field(DIMS, 4), weak_field(DIMS, 0.2, 4)):
        unitary, det = unitarity_violation(u)
        assert unitary < 1e-13 and det < 1e-13
    assert abs(plaquette(haar_field(DIMS, 4))) < 0.05
    weak = plaquette(weak_field(DIMS, 0.1, 4))
    assert 0.9 < weak < 1.0
    assert plaquette(weak_field(DIMS, 0.05, 4)) > weak


def test_bad_input_is_refused_clearly(context, fields):
    u = fields["haar"]
    with pytest.raises(ValueError, match="shape"):
        WilsonOperator(context, u[:3], KAPPA)
    with pytest.raises(TypeError, match="complex"):
        WilsonOperator(context, u.real, KAPPA)
    with pytest.raises(ValueError, match="precision"):
        WilsonOperator(context, u, KAPPA, precision="quarter")
    with pytest.raises(ValueError, match="reconstruct"):
        WilsonOperator(context, u, KAPPA, reconstruct=9)
    with pytest.raises(ValueError, match="t_boundary"):
        WilsonOperator(context, u, KAPPA, t_boundary=0)
    with pytest.raises(ValueError, match="not unitary"):
        WilsonOperator(context, u * 1.01, KAPPA)
    with pytest.raises(ValueError, match="SU\\(3\\)"):
        WilsonOperator(context, u * np.exp(0.3j), KAPPA, reconstruct=12)
    WilsonOperator(context, u * np.exp(0.3j), KAPPA, reconstruct=18)  # U(3) is fine uncompressed
    with pytest.raises(ValueError, match="even"):
        WilsonOperator(context, weak_field((4, 4, 4, 4), 0.1, 1)[:, :3], KAPPA)
    op = WilsonOperator(context, u, KAPPA)
    with pytest.raises(ValueError, match="spin, colour"):
        op.apply(np.zeros((8, 6, 4, 4, 3, 4), complex))
    with pytest.raises(TypeError, match="kappa"):
        WilsonOperator(context, u, 0.1j)


def test_device_methods_match_host_methods(context, fields):
    op = WilsonOperator(context, fields["weak"], KAPPA, "single", 12)
    psi = _spinor(10)
    field = op.to_device(psi.astype(np.complex64))
    out = op.new_field()
    op.apply(field, out=out)
    assert _rel(op.from_device(out), op.apply(psi)) < 1e-6
    with pytest.raises(ValueError, match="distinct"):
        op.apply(field, out=field)


@pytest.mark.force_autotune
@pytest.mark.parametrize("reconstruct", [12, 8])
def test_every_dslash_candidate_is_correct(context, reconstruct):
    """Every candidate of the search is checked against the reference; with 8 parameters in
    single precision the search includes the fast square roots and division."""
    import json

    DslashTemplate.autotune(context, DIMS, "single", reconstruct)
    trials = ResultStore.open().trials(function="operations.lqcd.dslash.DslashTemplate.autotune")
    assert trials and all(t.status == "ok" for t in trials), [(t.parameters, t.message) for t in trials]
    tried = [json.loads(t.parameters) for t in trials]
    assert {p["fast_math"] for p in tried} == ({False, True} if reconstruct == 8 else {False})
    # after the launch shape, the search tried the kernel's structure too
    assert any(p["sites"] != 1 or p["dir_split"] != 1 or p["stage"] or p["link_load"] != 16
               for p in tried), tried


@pytest.mark.force_autotune
def test_a_strategy_the_settings_name_searches_the_whole_space(context):
    """``warm``'s plan of a small space (``brute_force``, no budget) measures every
    configuration of the dslash's space, as ``--dry-run`` says, not the template's own budget
    after the launch shape; with a budget, within it."""
    import json

    function = "operations.lqcd.dslash.DslashTemplate.autotune"
    space = DslashTemplate.autotune_space(context, DIMS, "double", 18)
    with tune.search_settings(strategy="brute_force"):
        DslashTemplate.autotune(context, DIMS, "double", 18)
    tried = {json.dumps(json.loads(t.parameters), sort_keys=True)
             for t in ResultStore.open().trials(function=function)}
    every = {json.dumps(c, sort_keys=True) for c in space.configurations()}
    assert every <= tried and len(every) > 6 + 4
    with tune.search_settings(strategy="brute_force", max_evals=3):
        DslashTemplate.autotune(context, DIMS, "single", 18)
    single = [t for t in ResultStore.open().trials(function=function)
              if "single" in t.key.arguments]
    assert len(single) <= 2 * 3 + 1  # each step within the budget, and test=


@pytest.mark.force_autotune
def test_a_time_limit_spent_by_the_launch_shape_search_ends_the_key_there(context):
    """Under a time limit the first search spends for both (``warm --max-minutes`` late in a
    run), the key's result is the launch-shape search's best: the structure search would
    measure that best alone again (on the H200, 18 dslash keys took 33 of the 83 s of a
    ``warm --max-minutes 1``). With time left, the structure search runs from it."""
    import json

    function = "operations.lqcd.dslash.DslashTemplate.autotune"
    with tune.search_settings(max_seconds=1e-6):
        spent = DslashTemplate.autotune(context, DIMS, "double", 18)
    from operations.lqcd.dslash import STRUCTURE

    tried = [json.loads(t.parameters) for t in ResultStore.open().trials(function=function)]
    test = tune.tuner_of(DslashTemplate).test
    # the launch-shape search's alone (a GPU may measure the candidates it built ahead): the
    # structure at test=, and its best measured once, not again as the next search's seed
    assert tried.count(spent) == 1, tried
    assert all(p[n] == test[n] for p in tried for n in STRUCTURE if n in p), tried
    with tune.search_settings(max_evals=2):
        DslashTemplate.autotune(context, DIMS, "single", 18)
    single = [t for t in ResultStore.open().trials(function=function)
              if "single" in t.key.arguments]
    assert len(single) > 2  # both searches measured


@pytest.mark.parametrize("precision,reconstruct", [("single", 12), ("double", 18),
                                                  ("single", 8), ("half", 12)])
def test_the_online_scan_on_an_h200_and_where_it_starts(precision, reconstruct):
    """The dslash's online scan on a CUDA GPU (an H200's description: the space depends only on
    it): work-group sizes up to 256, minimum blocks none, 2 or 4, directions split 1 or 4 ways
    (whole warps a part), everything else at test=; its seeds are candidates of that scan,
    the shapes offline searches chose (four-way splits with 12 and 18 parameters in single and
    double precision)."""
    from autotune import tune
    from toy_templates import H200, DescribedContext

    h200 = DescribedContext(H200, "cuda")
    test = tune.tuner_of(DslashTemplate).test
    space = DslashTemplate.autotune_online_space(h200, DIMS, precision, reconstruct)
    found = space.configurations()
    shapes = {(c["wgs"], c["min_blocks"], c["dir_split"]) for c in found}
    assert shapes == {(w, m, d) for w in (32, 64, 128, 256) for m in (0, 2, 4) for d in (1, 4)
                      if w // d % 32 == 0}
    assert len(found) == 18 and all(
        {k: v for k, v in c.items() if k not in ("wgs", "min_blocks", "dir_split")}
        == {k: v for k, v in test.items() if k not in ("wgs", "min_blocks", "dir_split")}
        for c in found)
    seeds = DslashTemplate.autotune_online_seeds(h200, DIMS, precision, reconstruct)
    assert seeds and all(space.why_not({**test, **seed}) is None for seed in seeds)
    four_way = precision != "half" and reconstruct != 8
    assert (seeds[0].get("dir_split") == 4) == four_way


def test_hop_at_sampled_sites_matches_the_full_reference(fields):
    u, psi = fields["haar"], _spinor(12)
    full = reference.hop(u, psi, -1, dagger=True)
    coords = np.array([[0, 0, 0, 0], [7, 5, 3, 3], [3, 2, 1, 0], [7, 0, 3, 1]])
    assert _rel(reference.hop_at(u, psi, coords, -1, dagger=True), full[tuple(coords.T)]) < 1e-15


def _domain_hop(u, psi, domain, t_boundary=-1):
    """D psi with every hop that leaves a Schwarz domain dropped, written from the formula:
    the forward hop from x leaves when x_mu is the domain's last coordinate, the backward hop
    when it is its first (only in directions the domain cuts)."""
    eye = np.eye(4)
    shape = psi.shape[:4]  # (T, Z, Y, X)
    coords = np.indices(shape)
    out = np.zeros_like(psi)
    for mu in range(4):
        axis = 3 - mu
        c, b, extent = coords[axis], domain[mu], shape[axis]
        forward = np.roll(psi, -1, axis=axis)
        backward = np.roll(psi, 1, axis=axis)
        if mu == 3:
            forward[-1] *= t_boundary
            backward[0] *= t_boundary
        keep_f = ~((c % b == b - 1) & (b < extent))
        keep_b = ~((c % b == 0) & (b < extent))
        hop_f = np.einsum("...ij,ab,...bj->...ai", u[mu], eye - GAMMA[mu], forward)
        u_back = np.roll(u[mu], 1, axis=axis)
        hop_b = np.einsum("...ji,ab,...bj->...ai", u_back.conj(), eye + GAMMA[mu], backward)
        out += keep_f[..., None, None] * hop_f + keep_b[..., None, None] * hop_b
    return out


@pytest.mark.parametrize("domain,shape", [((2, 4, 3, 4), None), ((4, 2, 6, 2), None), (DIMS, None),
                                          ((2, 4, 3, 4), "split")])
def test_the_schwarz_domain_dslash_drops_exactly_the_hops_that_leave_a_domain(
        context, command_queue, fields, domain, shape):
    """The block-local (Dirichlet) dslash of a Schwarz preconditioner, both parities, against
    the formula with those hops dropped; one domain spanning the lattice is the full dslash.
    Also with a tuned shape (two sites a work-item, directions split, x neighbours staged),
    which a Schwarz preconditioner takes from the full dslash's tuning."""
    from operations.lqcd import Lattice

    u, psi = fields["haar"], _spinor(21)
    lat = Lattice(DIMS)
    want = _domain_hop(u, psi, domain)
    tuning = ({"wgs": 16} if shape is None else
              {"wgs": 64, "sites": 2, "dir_split": 2, "stage": True})
    template = DslashTemplate(context, DIMS, "double", 12, -1, tuning, domain=domain)
    links = template.gauge_to_device(command_queue, u)
    dslash = template.instantiate(command_queue)
    for parity in (0, 1):
        inp = context.to_device(command_queue, lat.spinor_to_device(psi, 1 - parity, np.complex128))
        out = context.allocate((12, lat.half_volume), np.complex128)
        dslash(out, inp, links, parity)
        got = out.get(command_queue)
        assert _rel(got, lat.spinor_to_device(want, parity, np.complex128)) < 1e-13, parity
    if domain == DIMS:
        assert _rel(want, reference.hop(u, psi, -1)) < 1e-15
    else:  # the domains cut the lattice: hops were dropped
        assert _rel(want, reference.hop(u, psi, -1)) > 1e-3
    with pytest.raises(ValueError, match="divide"):
        DslashTemplate(context, DIMS, "double", 12, -1, {"wgs": 16}, domain=(3, 4, 6, 8))


def test_big_lattices_are_tuned_on_tiled_fields(monkeypatch):
    """Above TILED_ABOVE sites the tuning problem repeats a small tile of Haar links and a
    Gaussian spinor (made in seconds at 48^3 x 96); its reference at the sampled sites is the
    full hop of the tiled fields, antiperiodic time boundary included."""
    from operations.lqcd import dslash

    monkeypatch.setattr(dslash, "TILED_ABOVE", 100)
    monkeypatch.setattr(dslash, "TILE", 4)
    dims = (8, 4, 6, 12)
    lattice, u, psi, sample, expected = dslash._tuning_fields(dims)
    assert dslash._tile_of(dims) == (4, 4, 2, 4)
    assert np.array_equal(u[:, :, :, :, :4], u[:, :, :, :, 4:])  # x repeats every 4
    assert np.array_equal(psi[:4], psi[4:8]) and not np.array_equal(psi[:4], psi[1:5])
    assert max(unitarity_violation(u)) < 1e-12
    want = lattice.spinor_to_device(reference.hop(u, psi, -1), 0, np.complex128)[:, sample].T
    assert _rel(expected, want) < 1e-14


def test_the_tuning_problem_keeps_the_fields_in_the_device_orders():
    """What the dslash's tuning uploads: the links by parity and the odd sites of the spinor
    (the lexicographic fields are not kept), and its links in every precision and layout as
    gauge_to_device's documented steps make them (pack, links_to_device, links_to_half,
    group_links)."""
    from operations.lqcd import dslash, gauge, half
    from operations.lqcd.dslash_links import device_links, group_links, link_groups, link_loads

    dims = (4, 4, 2, 6)
    dslash.tuning_problem.cache_clear()
    try:
        problem = dslash.tuning_problem(dims)
        lattice, u, psi, sample, expected = dslash._tuning_fields(dims)
    finally:
        dslash.tuning_problem.cache_clear()
    assert np.array_equal(problem.spinor, lattice.spinor_to_device(psi, 1, np.complex128))
    for parity in (0, 1):  # the links of each parity's sites, in checkerboard order
        assert np.array_equal(problem.links[:, parity],
                              u.reshape(4, -1, 3, 3)[:, lattice.sites(parity)])
    assert np.array_equal(problem.sample, sample) and np.array_equal(problem.expected, expected)
    values, norms = problem.half_spinor
    want_values, want_norms = half.spinor_to_half(problem.spinor)
    assert np.array_equal(values, want_values) and np.array_equal(norms, want_norms)
    for reconstruct in (18, 12, 8):
        packed = gauge.pack(u, reconstruct)
        assert np.array_equal(  # the links by parity, packed, are pack's in checkerboard order
            np.swapaxes(gauge.pack_links(problem.links, reconstruct), 2, 3),
            lattice.links_to_device(packed, packed.dtype))
        for precision in ("half", "single", "double"):
            if precision == "half":
                links = half.links_to_half(lattice.links_to_device(
                    packed, np.float64 if reconstruct == 8 else np.complex128), reconstruct)
            else:
                real, cplx = dslash.PRECISIONS[precision]
                links = lattice.links_to_device(packed, real if reconstruct == 8 else cplx)
            for load in link_loads(precision, reconstruct):
                want = group_links(links, link_groups(precision, reconstruct, load))
                got = device_links(gauge.pack_links(problem.links, reconstruct), precision,
                                   reconstruct, load)
                assert got.dtype == want.dtype and np.array_equal(got, want), (precision, load)


def test_link_groups_lay_out_every_parameter_once():
    """dslash_links.link_groups' layout: per group a block of V/2 sites, a site's group contiguous;
    groups of one are the plain component-major layout."""
    from operations.lqcd.dslash_links import group_links, link_groups, link_loads

    rng = np.random.default_rng(14)
    bytes_per = {"half": 2, "single": 4, "double": 8}
    for precision, (reconstruct, n) in itertools.product(("half", "single", "double"),
                                                        ((18, 9), (12, 6), (8, 8))):
        for load in link_loads(precision, reconstruct):
            widths = link_groups(precision, reconstruct, load)
            number = bytes_per[precision] * (1 if reconstruct == 8 else 2)
            # every load at most `load` bytes, all of them but the last exactly
            assert sum(widths) == n and all(w * number <= load for w in widths)
            assert all(w * number == load for w in widths[:-1]) or number >= load
            links = rng.standard_normal((4, 2, n, 24))
            grouped = group_links(links, widths)
            first = 0
            for w in widths:
                block = grouped[:, :, first * 24:(first + w) * 24].reshape(4, 2, 24, w)
                np.testing.assert_array_equal(block, np.swapaxes(links[:, :, first:first + w], 2, 3))
                first += w
            plain = group_links(links, (1,) * n)
            np.testing.assert_array_equal(plain, links.reshape(4, 2, n * 24))
    with pytest.raises(ValueError, match="do not cover"):
        group_links(np.zeros((4, 2, 6, 8)), (4, 4))
    with pytest.raises(ValueError, match="16 bytes at a time, not 8"):
        link_groups("double", 12, 8)


#: kernel shapes whose code differs: sites a work-item, directions split between work-items
#: (their sums added in local memory), x neighbours staged in local memory, link load widths
#: (work-group sizes in every device's space, each direction part a whole warp on GPUs)
SHAPES = {"all": {"wgs": 256, "sites": 2, "dir_split": 4, "stage": True, "link_load": 8},
          "pairs": {"wgs": 64, "sites": 1, "dir_split": 2, "stage": True, "link_load": 16},
          "rounds": {"wgs": 64, "sites": 2, "dir_split": 1, "stage": False, "link_load": 8}}
SHAPE_CASES = ([("all", p, r) for p in ("half", "single", "double") for r in (18, 12, 8)]
               + [("pairs", p, 12) for p in ("half", "single", "double")]
               + [("rounds", "half", 8), ("rounds", "single", 18)])
#: the cases a CPU device runs (device_breadth): the "all" shape in each precision and each
#: compression once, every shape with every precision it has above, every shape with each of
#: its compressions; GPUs run every case
CPU_SHAPE_CASES = [("all", "half", 18), ("all", "single", 8), ("all", "double", 12),
                   ("pairs", "half", 12), ("pairs", "single", 12), ("pairs", "double", 12),
                   ("rounds", "half", 8), ("rounds", "single", 18)]


@pytest.mark.parametrize("shape,precision,reconstruct", SHAPE_CASES,
                         ids=[f"{s}-{p}-{r}" for s, p, r in SHAPE_CASES])
def test_every_kernel_shape_matches_the_reference(context, command_queue, shape, precision,
                                                  reconstruct):
    """Each tuned shape of the dslash (sites per work-item, directions split between
    work-items, staged neighbours, 8- or 16-byte link loads) computes D and D^dagger, with and
    without x + a D psi, on both parities, as the numpy reference does: on a lattice whose
    half volume (144) is no multiple of a work-group's sites, so the last round is partial,
    with x extents of 4 (neighbours across the x edge fall outside the staged block).

    Each variant (parity, dagger, xpay) is a kernel of its own, and on a CPU device (PoCL)
    each costs seconds to compile: there the case runs the half of the eight that still
    meets every pair of values of any two of the three, and only the cases of
    :data:`CPU_SHAPE_CASES` run (``device_breadth``); GPUs run every case and all eight."""
    from operations.lqcd import half
    from operations.lqcd.lattice import Lattice

    only_on_gpus(context, (shape, precision, reconstruct), CPU_SHAPE_CASES)
    if precision == "double" and not context.device.double_precision:
        pytest.skip("no double precision")
    params = SHAPES[shape]
    if shape == "all" and precision == "double" and context.device.is_gpu:
        params = {**params, "wgs": 128}  # 256 would take more than 48 KiB of shared memory
    if precision == "double" and reconstruct != 8:
        params = {**params, "link_load": 16}  # one complex double is 16 bytes
    dims = (4, 6, 2, 6)
    lat = Lattice(dims)
    u = haar_field(dims, seed=5)
    shape5 = lat.shape
    psi, x = _spinor(21, shape5), _spinor(22, shape5)
    template = DslashTemplate(context, dims, precision, reconstruct, -1, params)
    assert template.global_size % params["wgs"] == 0
    links = template.gauge_to_device(command_queue, u)
    dslash = template.instantiate(command_queue)
    tol = {"half": 5e-3, "single": 2e-6, "double": 1e-13}[precision]
    dtype = np.complex64 if precision == "single" else np.complex128

    def put(field, parity):
        values = lat.spinor_to_device(field, parity, dtype)
        return (half.to_device(context, command_queue, values) if precision == "half"
                else context.to_device(command_queue, values))

    for dagger, parity, xpay in variants(context):
        full = reference.hop(u, psi, -1, dagger=dagger)
        inp, xin = put(psi, 1 - parity), put(x, parity)
        out = (half.HalfSpinor.allocate(context, lat.half_volume) if precision == "half"
               else context.allocate((12, lat.half_volume), dtype))
        dslash(out, inp, links, parity, dagger=dagger, x=xin if xpay else None, a=-0.37)
        got = (half.from_device(command_queue, out) if precision == "half"
               else out.get(command_queue))
        want = lat.spinor_to_device(x - 0.37 * full if xpay else full, parity, np.complex128)
        assert _rel(got, want) < tol, (dagger, parity, xpay, _rel(got, want))
