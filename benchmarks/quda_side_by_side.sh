#!/bin/bash
# Our dslash and solvers beside QUDA's dslash_test and invert_test on one GPU machine, as the
# tables of docs/performance.md were measured. Run from the checkout root on the GPU machine,
# after the setup of ../shared/device (its setup.sh), with results written under $OUT:
#
#   benchmarks/quda_side_by_side.sh build             QUDA in the background (about 5 minutes, 16 cores:
#                                                     not beside a timing), from $QUDA_SRC/build.sh
#   benchmarks/quda_side_by_side.sh tune L [L ...]    our dslash tuned at lattices L (e.g. 32,32,32,32)
#                                                     into $DB (a copy of tune.db.example made once)
#   benchmarks/quda_side_by_side.sh dslash            QUDA's dslash_test for the 9 (precision, reconstruct)
#                                                     at 32^4 (waits for the build), then ours re-timed
#                                                     from $DB with 100 launches a batch
#   benchmarks/quda_side_by_side.sh solvers           double-half and double-single CG at 32^4, kappa 0.2:
#                                                     ours (benchmarks/solvers.py) and invert_test
#
# QUDA_SRC: the folder of QUDA's build script (default .gpu/quda, a copy of ../shared/quda);
# its binaries land in /tmp/qb/tests. DB: default /tmp/side-by-side/tune.db.
set -u
cmd=${1:?"give build, tune, dslash or solvers"}; shift
OUT=${OUT:?"set OUT to a folder for the results"}
QUDA_SRC=${QUDA_SRC:-.gpu/quda}
DB=${DB:-/tmp/side-by-side/tune.db}
QUDA_BIN=/tmp/qb/tests

ensure_db() { mkdir -p "$(dirname "$DB")" /tmp/qres; [ -f "$DB" ] || cp tune.db.example "$DB"; }

wait_for_quda() {
  for _ in $(seq 1 90); do grep -q "QUDA built" /tmp/qb.out 2>/dev/null && return 0; sleep 5; done
  echo "QUDA is not built (see /tmp/qb.out)"; exit 1
}

case $cmd in
  build)
    [ -x $QUDA_BIN/dslash_test ] || (setsid nohup bash "$QUDA_SRC/build.sh" > /tmp/qb.out 2>&1 &) ;;
  tune)
    ensure_db
    for L in "$@"; do
      name=${L//,/x}
      python benchmarks/wilson_dslash.py --lattices "$L" --db "$DB" --json "$OUT/ours_tune_$name.json" \
        > "$OUT/ours_tune_$name.log" 2>&1
      tail -12 "$OUT/ours_tune_$name.log"
    done ;;
  dslash)
    ensure_db; wait_for_quda
    for P in half single double; do for R in 18 12 8; do
      QUDA_RESOURCE_PATH=/tmp/qres $QUDA_BIN/dslash_test --dslash-type wilson --prec $P --recon $R \
        --dim 32 32 32 32 --niter 1000 --verify false --gtest_filter='*benchmark*' > "$OUT/quda_${P}_$R.log" 2>&1
      echo "QUDA $P $R: $(grep -E 'GFLOPS' "$OUT/quda_${P}_$R.log" | tail -1)"
    done; done
    python benchmarks/wilson_dslash.py --lattices 32,32,32,32 --db "$DB" --repeats 100 \
      --json "$OUT/ours_after_quda.json" > "$OUT/ours_after_quda.log" 2>&1
    tail -12 "$OUT/ours_after_quda.log" ;;
  solvers)
    ensure_db; wait_for_quda
    AUTOTUNE_DB="$DB" python benchmarks/solvers.py --kappas 0.2 --json "$OUT/solvers.json" > "$OUT/solvers.log" 2>&1
    grep -E '"kappa"' "$OUT/solvers.log"
    for S in half single; do
      QUDA_RESOURCE_PATH=/tmp/qres $QUDA_BIN/invert_test --dslash-type wilson --inv-type cg --solve-type normop-pc \
        --prec double --prec-sloppy $S --recon 12 --recon-sloppy 12 --dim 32 32 32 32 --kappa 0.2 --tol 1e-10 \
        --niter 20000 --nsrc 4 > "$OUT/invert_$S.log" 2>&1
      echo "QUDA double-$S (the last source is the one compared): $(grep -E 'Done:' "$OUT/invert_$S.log" | tail -1)"
    done ;;
  *) echo "unknown command $cmd: give build, tune, dslash or solvers"; exit 2 ;;
esac
